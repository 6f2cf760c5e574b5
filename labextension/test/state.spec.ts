import { GpugeekApiError } from '../src/api';
import { deepEqual, describeOutage, diffByKey, OUTAGE_HINT, OutageMonitor } from '../src/state';
import { makePool } from './fixtures';

describe('diffByKey', () => {
  const byName = (pool: { name: string }): string => pool.name;

  it('finds added, changed and removed pools and the new order', () => {
    const a = makePool({ name: 'a' });
    const b = makePool({ name: 'b' });
    const c = makePool({ name: 'c' });
    const b2 = { ...b, usd_so_far: 1 };
    expect(diffByKey([a, b], [c, b2], byName)).toEqual({
      added: [c],
      changed: [b2],
      removed: ['a'],
      order: ['c', 'b']
    });
  });

  it('reports nothing for an identical poll answer', () => {
    const pools = [makePool({ name: 'a' }), makePool({ name: 'b' })];
    const again = JSON.parse(JSON.stringify(pools));
    expect(diffByKey(pools, again, byName)).toEqual({ added: [], changed: [], removed: [], order: ['a', 'b'] });
  });

  it('notices a change inside the utilisation history', () => {
    const before = makePool({ sm_util_history: [1, 2] });
    const after = makePool({ sm_util_history: [1, 2, 3] });
    expect(diffByKey([before], [after], byName).changed).toEqual([after]);
  });
});

describe('deepEqual', () => {
  it('compares JSON values structurally', () => {
    expect(deepEqual({ a: [1, { b: null }] }, { a: [1, { b: null }] })).toBe(true);
    expect(deepEqual({ a: 1 }, { a: 1, b: undefined })).toBe(false);
    expect(deepEqual([1, 2], { 0: 1, 1: 2 })).toBe(false);
    expect(deepEqual(null, {})).toBe(false);
  });
});

describe('OutageMonitor', () => {
  const unreachable = new GpugeekApiError('no answer', 0);

  it('asks for one notice however many polls fail the same way', () => {
    const monitor = new OutageMonitor();
    expect(monitor.fail(unreachable)).toBe(true);
    expect(monitor.fail(unreachable)).toBe(false);
    expect(monitor.fail(unreachable)).toBe(false);
    expect(monitor.failures).toBe(3);
    expect(monitor.current).toEqual({ message: 'The Jupyter server is not answering.', hint: OUTAGE_HINT });
  });

  it('clears the notice when the server answers again', () => {
    const monitor = new OutageMonitor();
    monitor.fail(unreachable);
    expect(monitor.succeed()).toBe(true);
    expect(monitor.current).toBeNull();
    expect(monitor.succeed()).toBe(false);
  });

  it('redraws the notice when the kind of failure changes', () => {
    const monitor = new OutageMonitor();
    monitor.fail(unreachable);
    expect(monitor.fail(new GpugeekApiError('GET /gpugeek/pools answered 404', 404, null, true))).toBe(true);
    expect(monitor.current?.message).toBe('The Jupyter server has no /gpugeek routes.');
  });

  it('hints at the server extension list', () => {
    expect(OUTAGE_HINT).toBe(
      'is the gpugeek_jupyter server extension installed and enabled? (jupyter server extension list)'
    );
  });

  it('describes server errors with their message', () => {
    expect(describeOutage(new GpugeekApiError('database is locked', 500))).toBe(
      'The GPU pools API failed: database is locked'
    );
    expect(describeOutage(new Error('boom'))).toBe('The GPU pools API failed: boom');
  });
});
