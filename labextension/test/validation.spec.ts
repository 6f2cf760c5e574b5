import {
  defaultLaunchValues,
  fieldApplies,
  fieldHelp,
  gpusOnThisMachine,
  ILaunchFormValues,
  inFormWords,
  isLaunchField,
  parseLaunchForm,
  POOL_NAME_PATTERN,
  suggestPoolName,
  validateBackend,
  validateBudget,
  validateCount,
  validateGpuType,
  validateIdleTimeout,
  validateInterconnect,
  validateName,
  validateField,
  validateSpotFraction,
  validateWalltime
} from '../src/validation';
import { CATALOG } from './fixtures';

function values(overrides: Partial<ILaunchFormValues> = {}): ILaunchFormValues {
  return {
    gpu_type: 'A100',
    interconnect: '',
    count: '4',
    backend: 'local',
    spot_fraction: '0.5',
    budget: '25',
    idle_timeout: '30',
    name: 'train-a100',
    partition: '',
    account: '',
    qos: '',
    walltime: '',
    constraint: '',
    prologue: '',
    ...overrides
  };
}

describe('count', () => {
  it.each(['1', '4', '1024', ' 8 '])('accepts %p', raw => {
    expect(validateCount(raw)).toBeNull();
  });

  it.each(['0', '1025', '-1', '2.5', '', 'four', '1e2'])('rejects %p', raw => {
    expect(validateCount(raw)).toMatch(/^count must be a whole number from 1 to 1024/);
  });

  it('names the bad value and a valid example', () => {
    expect(validateCount('0')).toBe(
      "count must be a whole number from 1 to 1024, got '0' (e.g. 4)"
    );
  });
});

describe('spot_fraction', () => {
  it.each(['0', '1', '0.25', '.5'])('accepts %p', raw => {
    expect(validateSpotFraction(raw)).toBeNull();
  });

  it.each(['-0.1', '1.01', '', 'half'])('rejects %p', raw => {
    expect(validateSpotFraction(raw)).toContain(`got '${raw}'`);
  });
});

describe('budget', () => {
  it('treats an empty budget as no cap', () => {
    expect(validateBudget('')).toBeNull();
  });

  it.each(['0', '12.5'])('accepts %p', raw => {
    expect(validateBudget(raw)).toBeNull();
  });

  it.each(['-1', 'lots'])('rejects %p', raw => {
    expect(validateBudget(raw)).toMatch(/^budget must be a number of USD >= 0/);
  });
});

describe('idle_timeout', () => {
  it.each(['0', '30', '2.5'])('accepts %p minutes', raw => {
    expect(validateIdleTimeout(raw)).toBeNull();
  });

  it.each(['-5', '', 'soon'])('rejects %p', raw => {
    expect(validateIdleTimeout(raw)).toMatch(/^idle_timeout must be a number of minutes >= 0/);
  });
});

describe('name', () => {
  it.each(['a', 'pool-1', 'train-a100', 'x'.repeat(63)])('accepts %p', raw => {
    expect(validateName(raw)).toBeNull();
  });

  it.each(['', 'Pool', '-pool', 'pool-', 'pool_1', 'pool.1', 'x'.repeat(64)])('rejects %p', raw => {
    expect(validateName(raw)).toMatch(/^name must be 1-63 lowercase letters/);
  });

  it('uses the same pattern as the server', () => {
    expect(POOL_NAME_PATTERN.source).toBe('^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$');
  });
});

describe('gpu_type, backend and interconnect', () => {
  it('requires a GPU type', () => {
    expect(validateGpuType('', null)).toMatch(/gpu_type is required/);
  });

  it('accepts any GPU type before the catalog has loaded', () => {
    expect(validateGpuType('H100', null)).toBeNull();
  });

  it('rejects a GPU type the catalog does not list, with one that it does', () => {
    expect(validateGpuType('H100', CATALOG)).toBe(
      "gpu_type must be one of the catalog's GPU types, got 'H100' (e.g. A100)"
    );
  });

  it('accepts only the catalog backends', () => {
    expect(validateBackend('kubernetes', CATALOG)).toBeNull();
    expect(validateBackend('slurm', CATALOG)).toMatch(/backend must be one of local, address, kubernetes/);
  });

  it('checks the interconnect against the chosen GPU type', () => {
    expect(validateInterconnect('', 'T4', CATALOG)).toBeNull();
    expect(validateInterconnect('nvlink', 'A100', CATALOG)).toBeNull();
    expect(validateInterconnect('nvlink', 'T4', CATALOG)).toMatch(/interconnect for T4 must be one of pcie/);
  });
});

describe('parseLaunchForm', () => {
  it('builds the POST body from valid input', () => {
    const parsed = parseLaunchForm(values(), CATALOG);
    expect(parsed.errors).toEqual({});
    expect(parsed.request).toEqual({
      gpu_type: 'A100',
      count: 4,
      backend: 'local',
      spot_fraction: 0.5,
      budget: 25,
      idle_timeout: 30,
      name: 'train-a100'
    });
  });

  it('sends a null budget when the field is empty', () => {
    expect(parseLaunchForm(values({ budget: '' }), CATALOG).request?.budget).toBeNull();
  });

  it('sends the interconnect only when one is chosen', () => {
    expect(parseLaunchForm(values({ interconnect: 'nvlink' }), CATALOG).request?.interconnect).toBe('nvlink');
    expect(parseLaunchForm(values(), CATALOG).request).not.toHaveProperty('interconnect');
  });

  it('reports every bad field at once and builds no body', () => {
    const parsed = parseLaunchForm(values({ count: '0', name: 'Bad_Name', spot_fraction: '2' }), CATALOG);
    expect(parsed.request).toBeNull();
    expect(Object.keys(parsed.errors).sort()).toEqual(['count', 'name', 'spot_fraction']);
  });
});

describe('defaults and names', () => {
  it('suggests the first free pool-N name', () => {
    expect(suggestPoolName([])).toBe('pool-1');
    expect(suggestPoolName(['pool-1', 'pool-3'])).toBe('pool-2');
  });

  it('takes initial values from the catalog defaults', () => {
    const initial = defaultLaunchValues(CATALOG, ['pool-1']);
    expect(initial).toMatchObject({
      gpu_type: 'T4',
      count: '2',
      backend: 'local',
      spot_fraction: '0.5',
      budget: '',
      idle_timeout: '15',
      name: 'pool-2'
    });
  });

  it('produces valid values without a catalog except for the GPU type', () => {
    const parsed = parseLaunchForm(defaultLaunchValues(null, []), null);
    expect(Object.keys(parsed.errors)).toEqual(['gpu_type']);
  });

  it('recognises the form fields the server may blame', () => {
    expect(isLaunchField('count')).toBe(true);
    expect(isLaunchField('pools')).toBe(false);
    expect(isLaunchField(null)).toBe(false);
  });
});

describe('slurm fields', () => {
  const slurm = { backend: 'slurm' as const };
  const catalog = { ...CATALOG, backends: [...CATALOG.backends, 'slurm' as const] };

  it("accepts Slurm's time limits, as the server does, and names a bad one with an example", () => {
    for (const good of ['', '30', '45:00', '04:00:00', '2-12', '2-12:30', '2-12:30:00']) {
      expect(validateWalltime(good)).toBeNull();
    }
    expect(validateWalltime('4h')).toBe(
      "walltime must be a Slurm time limit (minutes, HH:MM:SS or D-HH:MM:SS), got '4h' (e.g. 04:00:00)"
    );
  });

  it('sends the filled-in Slurm fields only for a slurm pool', () => {
    const filled = { partition: ' gpu ', walltime: '01:00:00', prologue: 'module load cuda/12.4\nsource venv/bin/activate' };
    const parsed = parseLaunchForm(values({ ...slurm, ...filled }), catalog);
    expect(parsed.errors).toEqual({});
    expect(parsed.request).toMatchObject({
      backend: 'slurm',
      partition: 'gpu',
      walltime: '01:00:00',
      prologue: 'module load cuda/12.4\nsource venv/bin/activate'
    });
    expect(parsed.request).not.toHaveProperty('account');
    const local = parseLaunchForm(values(filled), catalog).request!;
    expect(local).not.toHaveProperty('partition');
    expect(local).not.toHaveProperty('walltime');
  });

  it('checks the Slurm fields only for a slurm pool', () => {
    expect(parseLaunchForm(values({ walltime: '4h', partition: 'two words' }), catalog).errors).toEqual({});
    const parsed = parseLaunchForm(values({ ...slurm, walltime: '4h', partition: 'two words' }), catalog);
    expect(Object.keys(parsed.errors).sort()).toEqual(['partition', 'walltime']);
    expect(parsed.errors.partition).toBe("partition must be one Slurm name without spaces, got 'two words' (e.g. gpu)");
  });
});

describe('messages in the form’s words', () => {
  it('names fields by their labels, not their JSON keys', () => {
    expect(inFormWords("count must be a whole number from 1 to 1024, got '0' (e.g. 4)")).toBe(
      "GPUs must be a whole number from 1 to 1024, got '0' (e.g. 4)"
    );
    expect(inFormWords("spot_fraction must be a number from 0 to 1, got '2' (e.g. 0.5)")).toBe(
      "Spot fraction must be a number from 0 to 1, got '2' (e.g. 0.5)"
    );
    expect(inFormWords('"idle_timeout" must be a number of minutes >= 0')).toBe(
      'Idle timeout must be a number of minutes >= 0'
    );
  });

  it("rewords the server's JSON settings and leaves other words alone", () => {
    expect(
      inFormWords(
        '"gpu_type": "A100-80GB", "count": 1 needs 1 x A100-80GB, but this machine has no NVIDIA GPU; ' +
          'use "gpu_type": "cpu" here, or "backend": "kubernetes" for a cluster that has them'
      )
    ).toBe(
      'GPU type "A100-80GB", GPUs 1 needs 1 x A100-80GB, but this machine has no NVIDIA GPU; ' +
        'use GPU type "cpu" here, or Backend "kubernetes" for a cluster that has them'
    );
    expect(inFormWords('name the pool: a count of names')).toBe('Name the pool: a count of names');
    expect(inFormWords('pool "dev" is already running')).toBe('pool "dev" is already running');
  });
});

describe('GPUs this machine has', () => {
  const here = {
    ...CATALOG,
    gpus_here: 'no NVIDIA GPU (NVML library not found)',
    gpu_types: CATALOG.gpu_types.map(gpu => ({ ...gpu, on_this_machine: gpu.name === 'T4' ? 2 : 0 }))
  };

  it('refuses a local pool of GPUs this machine lacks, in the form’s words with what it has', () => {
    expect(validateField('gpu_type', values({ gpu_type: 'A100', count: '1', backend: 'local' }), here)).toBe(
      'This machine has no A100 (it has no NVIDIA GPU (NVML library not found)): pick GPU type cpu for a ' +
        'local pool, or Backend kubernetes, slurm or address for a cluster that has them'
    );
    expect(validateField('gpu_type', values({ gpu_type: 'T4', count: '4', backend: 'local' }), here)).toMatch(
      /^This machine has only 2 x T4/
    );
  });

  it('lets a cluster backend, a count that fits, or an unknown machine through', () => {
    expect(validateField('gpu_type', values({ gpu_type: 'A100', backend: 'kubernetes' }), here)).toBeNull();
    expect(validateField('gpu_type', values({ gpu_type: 'T4', count: '2' }), here)).toBeNull();
    expect(gpusOnThisMachine('A100', CATALOG)).toBeNull(); // a server that does not say
    expect(validateField('gpu_type', values({ gpu_type: 'A100' }), CATALOG)).toBeNull();
  });
});

describe("the server's declaration of the launch fields", () => {
  const declared = {
    ...CATALOG,
    launch_fields: {
      count: { type: 'integer', minimum: 1, maximum: 8, description: 'number of GPUs, one rank each' },
      partition: { type: ['string', 'null'], 'x-backends': ['slurm'], description: 'Slurm partition' },
      walltime: { type: ['string', 'null'], 'x-backends': ['slurm', 'kubernetes'] },
      budget: { type: ['number', 'null'] }
    }
  };

  it("shows a field for the backends it names, every backend when it names none", () => {
    expect(fieldApplies('partition', values({ backend: 'local' }), declared)).toBe(false);
    expect(fieldApplies('partition', values({ backend: 'slurm' }), declared)).toBe(true);
    expect(fieldApplies('walltime', values({ backend: 'kubernetes' }), declared)).toBe(true); // not the built-in rule
    expect(fieldApplies('budget', values({ backend: 'address' }), declared)).toBe(true);
  });

  it('sends a field only for the backends it is declared for', () => {
    const typed = { partition: 'gpu', walltime: '01:00:00' };
    const kube = parseLaunchForm(values({ ...typed, backend: 'kubernetes', gpu_type: 'T4', count: '1' }), declared);
    expect(kube.errors).toEqual({});
    expect(kube.request).toMatchObject({ walltime: '01:00:00' });
    expect(kube.request).not.toHaveProperty('partition');
    const local = parseLaunchForm(values({ ...typed, backend: 'local', gpu_type: 'T4', count: '1' }), null);
    expect(local.request).not.toHaveProperty('walltime');
    expect(local.request).not.toHaveProperty('partition');
  });

  it('keeps the Slurm fields to Slurm before the catalog has come', () => {
    expect(fieldApplies('walltime', values({ backend: 'kubernetes' }), null)).toBe(false);
    expect(fieldApplies('walltime', values({ backend: 'slurm' }), null)).toBe(true);
  });

  it("holds count to the server's bound and gives each field the server's help", () => {
    expect(validateField('count', values({ count: '9' }), declared)).toBe(
      "count must be a whole number from 1 to 8, got '9' (e.g. 4)"
    );
    expect(validateField('count', values({ count: '8' }), declared)).toBeNull();
    expect(fieldHelp('partition', declared)).toBe('Slurm partition');
    expect(fieldHelp('name', declared)).toBe('');
  });
});
