/**
 * The launch form's rules, in one place.
 *
 * They repeat the server's checks so mistakes show while typing; the server
 * stays the authority and its 400 answers are shown the same way. Messages
 * state the rule, the bad value and a valid example.
 */

import {
  DEFAULT_BACKENDS,
  ICatalog,
  ILaunchRequest,
  PoolBackend
} from './models';

export const MAX_COUNT = 1024;

/** A DNS-1123 label, so the name is valid for every backend, Kubernetes included. */
export const POOL_NAME_PATTERN = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;

/**
 * The launch form's text fields and selects; each is named after its key in
 * the POST body (`keep`, a checkbox that says who owns the pool, is apart).
 */
export type LaunchField = Exclude<keyof ILaunchRequest, 'keep'>;

export const LAUNCH_FIELDS: readonly LaunchField[] = [
  'gpu_type',
  'interconnect',
  'count',
  'backend',
  'spot_fraction',
  'budget',
  'idle_timeout',
  'name',
  ...(['partition', 'account', 'qos', 'walltime', 'constraint', 'prologue'] as const)
];

/**
 * The fields a Slurm pool adds (shown, checked and sent only with `backend: 'slurm'`), until the
 * server's declaration of the launch fields (`catalog.launch_fields`) says which backends each is for.
 */
export const SLURM_FIELDS: ReadonlySet<LaunchField> = new Set<LaunchField>([
  'partition',
  'account',
  'qos',
  'walltime',
  'constraint',
  'prologue'
]);

/** Slurm's time limits: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (the server's rule). */
export const WALLTIME_PATTERN = /^(\d+|\d+:\d{1,2}|\d+:\d{1,2}:\d{1,2}|\d+-\d+(:\d{1,2}){0,2})$/;

/**
 * Whether `field` belongs on the form for the chosen backend: the backends the server declares it
 * for (all when it names none), or the Slurm fields' rule before the catalog has come.
 */
export function fieldApplies(
  field: LaunchField,
  values: ILaunchFormValues,
  catalog: ICatalog | null = null
): boolean {
  const declared = catalog?.launch_fields?.[field];
  if (declared) {
    const backends = declared['x-backends'];
    return !backends || backends.includes(values.backend);
  }
  return !SLURM_FIELDS.has(field) || values.backend === 'slurm';
}

/** The most workers a pool may have: the server's bound on `count`, or MAX_COUNT before it is known. */
export function maxCount(catalog: ICatalog | null): number {
  return catalog?.launch_fields?.count?.maximum ?? MAX_COUNT;
}

/** What the server says a field is for (its help), to show beside the field; '' when it says nothing. */
export function fieldHelp(field: LaunchField, catalog: ICatalog | null): string {
  return catalog?.launch_fields?.[field]?.description ?? '';
}

/** Raw form input, one string per field as the inputs hold it. */
export type ILaunchFormValues = Record<LaunchField, string>;

export type IFieldErrors = Partial<Record<LaunchField, string>>;

export interface IParsedLaunchForm {
  /** Set only when `errors` is empty. */
  request: ILaunchRequest | null;
  errors: IFieldErrors;
}

/** What the form calls each field: its messages use these words, never the JSON keys. */
export const FIELD_LABELS: Record<LaunchField, string> = {
  gpu_type: 'GPU type',
  interconnect: 'Interconnect',
  count: 'GPUs',
  backend: 'Backend',
  spot_fraction: 'Spot fraction (0–1)',
  budget: 'Budget (USD)',
  idle_timeout: 'Idle timeout (minutes)',
  name: 'Name',
  partition: 'Slurm partition',
  account: 'Slurm account',
  qos: 'Slurm QOS',
  walltime: 'Walltime (HH:MM:SS)',
  constraint: 'Node constraint',
  prologue: 'Worker setup (shell lines)'
};

/** A field's label as a message names it: without its hint in parentheses. */
export function fieldWord(field: LaunchField): string {
  return FIELD_LABELS[field].replace(/\s*\(.*\)$/, '');
}

/**
 * A message (the form's own checks, or the server's, which names JSON keys:
 * `"gpu_type": "A100-80GB", "count": 1 needs ...`) in the form's words:
 * `GPU type "A100-80GB", GPUs 1 needs ...`.
 */
export function inFormWords(message: string): string {
  const word = (key: string): string | null => (isLaunchField(key) ? fieldWord(key) : null);
  return message
    .replace(/"(\w+)":\s*/g, (whole, key: string) => {
      const label = word(key);
      return label === null ? whole : `${label} `;
    })
    .replace(/"(\w+)"/g, (whole, key: string) => word(key) ?? whole)
    .replace(/\b[a-z]+_[a-z_]+\b/g, key => word(key) ?? key)
    .replace(/^([a-z]+)\b/, (whole, key: string) => word(key) ?? whole);
}

export function isLaunchField(field: unknown): field is LaunchField {
  return (LAUNCH_FIELDS as readonly unknown[]).includes(field);
}

function quoted(raw: string): string {
  return `'${raw}'`;
}

function parseNumber(raw: string): number | null {
  const text = raw.trim();
  if (text === '') {
    return null;
  }
  const value = Number(text);
  return Number.isFinite(value) ? value : null;
}

export function validateCount(raw: string, max: number = MAX_COUNT): string | null {
  const text = raw.trim();
  const value = /^\d+$/.test(text) ? Number(text) : NaN;
  if (!(value >= 1 && value <= max)) {
    return `count must be a whole number from 1 to ${max}, got ${quoted(raw)} (e.g. 4)`;
  }
  return null;
}

export function validateSpotFraction(raw: string): string | null {
  const value = parseNumber(raw);
  if (value === null || value < 0 || value > 1) {
    return `spot_fraction must be a number from 0 to 1, got ${quoted(raw)} (e.g. 0.5)`;
  }
  return null;
}

/** An empty budget means no cap. */
export function validateBudget(raw: string): string | null {
  if (raw.trim() === '') {
    return null;
  }
  const value = parseNumber(raw);
  if (value === null || value < 0) {
    return `budget must be a number of USD >= 0 (or empty for no cap), got ${quoted(raw)} (e.g. 25)`;
  }
  return null;
}

export function validateIdleTimeout(raw: string): string | null {
  const value = parseNumber(raw);
  if (value === null || value < 0) {
    return `idle_timeout must be a number of minutes >= 0 (0 never stops), got ${quoted(raw)} (e.g. 30)`;
  }
  return null;
}

export function validateName(raw: string): string | null {
  if (!POOL_NAME_PATTERN.test(raw)) {
    return (
      'name must be 1-63 lowercase letters, digits or "-", starting and ending ' +
      `with a letter or digit, got ${quoted(raw)} (e.g. train-a100)`
    );
  }
  return null;
}

/** An empty walltime leaves the site's default. */
export function validateWalltime(raw: string): string | null {
  const text = raw.trim();
  if (text !== '' && !WALLTIME_PATTERN.test(text)) {
    return `walltime must be a Slurm time limit (minutes, HH:MM:SS or D-HH:MM:SS), got ${quoted(raw)} (e.g. 04:00:00)`;
  }
  return null;
}

/** Partition, account, QOS and constraint are Slurm's names: one word each (Slurm checks the rest). */
export function validateSlurmName(field: LaunchField, raw: string): string | null {
  if (raw.trim() !== '' && /\s/.test(raw.trim())) {
    return `${field} must be one Slurm name without spaces, got ${quoted(raw)} (e.g. ${SLURM_EXAMPLES[field]})`;
  }
  return null;
}

const SLURM_EXAMPLES: Partial<Record<LaunchField, string>> = {
  partition: 'gpu',
  account: 'proj42',
  qos: 'normal',
  constraint: 'a100'
};

export function validateGpuType(raw: string, catalog: ICatalog | null): string | null {
  if (raw.trim() === '') {
    return 'gpu_type is required (pick one from the list)';
  }
  if (catalog && !catalog.gpu_types.some(gpu => gpu.name === raw)) {
    const example = catalog.gpu_types[0]?.name ?? 'A100';
    return `gpu_type must be one of the catalog's GPU types, got ${quoted(raw)} (e.g. ${example})`;
  }
  return null;
}

/** The GPUs of `gpuType` this machine has for a local pool; null when it sets no limit (cpu, unknown). */
export function gpusOnThisMachine(gpuType: string, catalog: ICatalog | null): number | null {
  const gpu = catalog?.gpu_types.find(candidate => candidate.name === gpuType);
  return gpu?.on_this_machine ?? null;
}

/** A local pool can have only the GPUs this machine has. */
export function validateLocalGpus(values: ILaunchFormValues, catalog: ICatalog | null): string | null {
  if (values.backend !== 'local') {
    return null;
  }
  const here = gpusOnThisMachine(values.gpu_type, catalog);
  const count = Number(values.count);
  if (here === null || !Number.isInteger(count) || count <= here) {
    return null;
  }
  const found = catalog?.gpus_here ? ` (it has ${catalog.gpus_here})` : '';
  const has = here === 0 ? `no ${values.gpu_type}` : `only ${here} x ${values.gpu_type}`;
  return (
    `This machine has ${has}${found}: pick GPU type cpu for a local pool, ` +
    'or Backend kubernetes, slurm or address for a cluster that has them'
  );
}

export function validateBackend(raw: string, catalog: ICatalog | null): string | null {
  const backends: readonly string[] = catalog?.backends ?? DEFAULT_BACKENDS;
  if (!backends.includes(raw)) {
    return `backend must be one of ${backends.join(', ')}, got ${quoted(raw)} (e.g. local)`;
  }
  return null;
}

/** An empty interconnect lets the server choose. */
export function validateInterconnect(
  raw: string,
  gpuType: string,
  catalog: ICatalog | null
): string | null {
  if (raw === '' || !catalog) {
    return null;
  }
  const gpu = catalog.gpu_types.find(candidate => candidate.name === gpuType);
  if (gpu && !gpu.interconnects.includes(raw)) {
    const choices = gpu.interconnects.join(', ') || 'none';
    return `interconnect for ${gpuType} must be one of ${choices}, got ${quoted(raw)}`;
  }
  return null;
}

/** Check one field; `values` gives the context some rules need. */
export function validateField(
  field: LaunchField,
  values: ILaunchFormValues,
  catalog: ICatalog | null
): string | null {
  const raw = values[field] ?? '';
  if (!fieldApplies(field, values, catalog)) {
    return null;
  }
  switch (field) {
    case 'gpu_type':
      return validateGpuType(raw, catalog) ?? validateLocalGpus(values, catalog);
    case 'interconnect':
      return validateInterconnect(raw, values.gpu_type ?? '', catalog);
    case 'count':
      return validateCount(raw, maxCount(catalog));
    case 'backend':
      return validateBackend(raw, catalog);
    case 'spot_fraction':
      return validateSpotFraction(raw);
    case 'budget':
      return validateBudget(raw);
    case 'idle_timeout':
      return validateIdleTimeout(raw);
    case 'name':
      return validateName(raw);
    case 'walltime':
      return validateWalltime(raw);
    case 'partition':
    case 'account':
    case 'qos':
    case 'constraint':
      return validateSlurmName(field, raw);
    case 'prologue':
      return null; // shell lines, run by the worker's job script: the server checks them
  }
}

/** Check every field and build the POST body when all pass. */
export function parseLaunchForm(
  values: ILaunchFormValues,
  catalog: ICatalog | null
): IParsedLaunchForm {
  const errors: IFieldErrors = {};
  for (const field of LAUNCH_FIELDS) {
    const error = validateField(field, values, catalog);
    if (error !== null) {
      errors[field] = error;
    }
  }
  if (Object.keys(errors).length > 0) {
    return { request: null, errors };
  }
  const request: ILaunchRequest = {
    gpu_type: values.gpu_type,
    count: Number(values.count.trim()),
    backend: values.backend as PoolBackend,
    spot_fraction: Number(values.spot_fraction.trim()),
    budget: values.budget.trim() === '' ? null : Number(values.budget.trim()),
    idle_timeout: Number(values.idle_timeout.trim()),
    name: values.name
  };
  if (values.interconnect !== '') {
    request.interconnect = values.interconnect;
  }
  // the backend's own fields, as fieldApplies says (the server's declaration once the catalog came)
  for (const field of ['partition', 'account', 'qos', 'walltime', 'constraint'] as const) {
    if (fieldApplies(field, values, catalog) && values[field].trim() !== '') {
      request[field] = values[field].trim();
    }
  }
  if (fieldApplies('prologue', values, catalog) && values.prologue.trim() !== '') {
    request.prologue = values.prologue; // shell lines: their spacing is theirs
  }
  return { request, errors };
}

/** The first `pool-N` name that no existing pool uses. */
export function suggestPoolName(existing: Iterable<string>): string {
  const taken = new Set(existing);
  let index = 1;
  while (taken.has(`pool-${index}`)) {
    index += 1;
  }
  return `pool-${index}`;
}

/** Initial form values, from the catalog's defaults where it gives them. */
export function defaultLaunchValues(
  catalog: ICatalog | null,
  existingNames: Iterable<string>
): ILaunchFormValues {
  const defaults = catalog?.defaults ?? {};
  const text = (value: unknown, fallback: string): string =>
    value === undefined || value === null ? fallback : String(value);
  return {
    gpu_type: text(defaults.gpu_type, catalog?.gpu_types[0]?.name ?? ''),
    interconnect: text(defaults.interconnect, ''),
    count: text(defaults.count, '1'),
    backend: text(defaults.backend, catalog?.backends[0] ?? 'local'),
    spot_fraction: text(defaults.spot_fraction, '0'),
    budget: text(defaults.budget, ''),
    idle_timeout: text(defaults.idle_timeout, '30'),
    name: suggestPoolName(existingNames),
    partition: text(defaults.partition, ''),
    account: text(defaults.account, ''),
    qos: text(defaults.qos, ''),
    walltime: text(defaults.walltime, ''),
    constraint: text(defaults.constraint, ''),
    prologue: text(defaults.prologue, '')
  };
}
