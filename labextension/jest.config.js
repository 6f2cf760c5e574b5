/**
 * Jest runs the model modules (API client, validation, formatting, state
 * diffing) in Node without a DOM; they import nothing from JupyterLab at
 * runtime, so no ESM transform of node_modules is needed.
 */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testRegex: '\\.spec\\.ts$',
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.test.json' }]
  }
};
