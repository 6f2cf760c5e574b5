/**
 * The launch form. Rules live in `validation.ts`; this module only draws
 * fields and errors and submits.
 */

import { caretDownEmptyIcon } from '@jupyterlab/ui-components';

import { GpugeekApi, GpugeekApiError } from './api';
import { h } from './dom';
import { estimateUsdPerHour, formatUsd, formatUsdPerHour } from './format';
import { DEFAULT_BACKENDS, ICatalog, IPoolModel } from './models';
import {
  defaultLaunchValues,
  FIELD_LABELS,
  gpusOnThisMachine,
  IFieldErrors,
  inFormWords,
  ILaunchFormValues,
  isLaunchField,
  LAUNCH_FIELDS,
  LaunchField,
  fieldApplies,
  fieldHelp,
  parseLaunchForm,
  suggestPoolName,
  validateField
} from './validation';

type FieldInput = HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement;

const SELECT_FIELDS: ReadonlySet<LaunchField> = new Set(['gpu_type', 'interconnect', 'backend']);

const INPUT_MODES: Partial<Record<LaunchField, string>> = {
  count: 'numeric',
  spot_fraction: 'decimal',
  budget: 'decimal',
  idle_timeout: 'decimal'
};

const PLACEHOLDERS: Partial<Record<LaunchField, string>> = {
  budget: 'no cap',
  name: 'train-a100',
  partition: "the site's default",
  account: 'your default account',
  qos: 'default',
  walltime: "the partition's limit",
  constraint: 'any node',
  prologue: 'module load cuda/12.4'
};

export interface ILaunchFormOptions {
  api: GpugeekApi;
  onLaunched: (pool: IPoolModel) => void;
}

export class LaunchForm {
  readonly node: HTMLFormElement;
  private readonly _inputs = new Map<LaunchField, FieldInput>();
  private readonly _fields = new Map<LaunchField, HTMLElement>();
  /** Fields the user changed; catalog defaults and name suggestions leave them alone. */
  private readonly _touched = new Set<LaunchField>();
  private readonly _submit: HTMLButtonElement;
  private readonly _estimate: HTMLElement;
  private readonly _formError: HTMLElement;
  private readonly _status: HTMLElement;
  private readonly _keep: HTMLInputElement;
  private _catalog: ICatalog | null = null;
  private _poolNames: string[] = [];

  constructor(private readonly _options: ILaunchFormOptions) {
    this._submit = h('button', {
      class: 'jp-mod-styled jp-mod-accept gpugeek-launch-button',
      text: 'Launch pool',
      attrs: { type: 'submit' }
    });
    this._estimate = h('div', { class: 'gpugeek-launch-estimate gpugeek-muted' });
    this._formError = h('div', { class: 'gpugeek-form-error', attrs: { role: 'alert' } });
    this._status = h('div', { class: 'gpugeek-launch-status gpugeek-muted', attrs: { role: 'status' } });
    this._keep = h('input', {
      attrs: { type: 'checkbox', name: 'keep', id: 'gpugeek-launch-keep', 'aria-describedby': 'gpugeek-launch-keep-hint' }
    });
    this.node = h(
      'form',
      {
        class: 'gpugeek-launch-form',
        attrs: { novalidate: '' },
        on: { submit: event => {
          event.preventDefault();
          void this.submit();
        } }
      },
      [
        ...LAUNCH_FIELDS.map(field => this._createField(field)),
        h('div', { class: 'gpugeek-field gpugeek-keep-field', data: { field: 'keep' } }, [
          h('label', { class: 'gpugeek-checkbox', attrs: { for: 'gpugeek-launch-keep' } }, [this._keep, 'Keep']),
          h('div', {
            class: 'gpugeek-field-hint',
            text:
              'Your agent owns the pool: it survives the kernel and this server, and runs detached jobs. ' +
              'Stop it here or with %gpugeek_stop; it costs until then.',
            attrs: { id: 'gpugeek-launch-keep-hint' }
          })
        ]),
        this._estimate,
        this._formError,
        h('div', { class: 'gpugeek-launch-actions' }, [this._submit]),
        this._status
      ]
    );
    this._fillSelects();
    this._setValues(defaultLaunchValues(null, []));
    this._showBackendFields();
  }

  get catalog(): ICatalog | null {
    return this._catalog;
  }

  /** Fill the selects from the catalog, and untouched fields from its defaults. */
  setCatalog(catalog: ICatalog): void {
    this._catalog = catalog;
    const defaults = defaultLaunchValues(catalog, this._poolNames);
    this._fillSelects();
    this._setValues(defaults, true);
    this._fillInterconnects();
    this._showBackendFields();
    this._showFieldHelp();
    this._updateEstimate();
  }

  /** Keep the suggested name unique among the pools the server lists. */
  setPoolNames(names: string[]): void {
    this._poolNames = names;
    const name = this._input('name');
    if (!this._touched.has('name') && names.includes(name.value)) {
      name.value = suggestPoolName(names);
    }
  }

  values(): ILaunchFormValues {
    const values = {} as ILaunchFormValues;
    for (const field of LAUNCH_FIELDS) {
      values[field] = this._input(field).value;
    }
    return values;
  }

  /** Show a message under a field, or remove it with null. */
  setFieldError(field: LaunchField, message: string | null): void {
    const wrapper = this._fields.get(field)!;
    const input = this._input(field);
    wrapper.querySelector('.gpugeek-field-error')?.remove();
    if (message === null) {
      input.removeAttribute('aria-invalid');
      wrapper.classList.remove('gpugeek-mod-invalid');
      return;
    }
    const errorId = `gpugeek-launch-${field}-error`;
    wrapper.appendChild(
      h('div', {
        class: 'gpugeek-field-error',
        text: inFormWords(message),
        data: { field },
        attrs: { id: errorId, role: 'alert' }
      })
    );
    input.setAttribute('aria-invalid', 'true');
    input.setAttribute('aria-describedby', errorId);
    wrapper.classList.add('gpugeek-mod-invalid');
  }

  showErrors(errors: IFieldErrors): void {
    for (const field of LAUNCH_FIELDS) {
      this.setFieldError(field, errors[field] ?? null);
    }
  }

  async submit(): Promise<void> {
    this._formError.textContent = '';
    this._status.textContent = '';
    const parsed = parseLaunchForm(this.values(), this._catalog);
    this.showErrors(parsed.errors);
    if (!parsed.request) {
      const first = LAUNCH_FIELDS.find(field => parsed.errors[field]);
      if (first) {
        this._input(first).focus();
      }
      return;
    }
    this._submit.disabled = true;
    this._submit.textContent = 'Launching…';
    const request = this._keep.checked ? { ...parsed.request, keep: true } : parsed.request;
    try {
      const pool = await this._options.api.launchPool(request);
      this._status.textContent = `Launched pool ${pool.name} (${pool.status}).`;
      this._touched.delete('name');
      this.setPoolNames([...this._poolNames, pool.name]);
      this._options.onLaunched(pool);
    } catch (error) {
      this._showLaunchError(error);
    } finally {
      this._submit.disabled = false;
      this._submit.textContent = 'Launch pool';
    }
  }

  private _showLaunchError(error: unknown): void {
    if (error instanceof GpugeekApiError && isLaunchField(error.field)) {
      this.setFieldError(error.field, error.message);
      this._input(error.field).focus();
      return;
    }
    const message = error instanceof Error ? error.message : String(error);
    this._formError.textContent = `Launch failed: ${inFormWords(message)}`;
  }

  private _createField(field: LaunchField): HTMLElement {
    const id = `gpugeek-launch-${field}`;
    let input: FieldInput;
    let control: HTMLElement;
    if (SELECT_FIELDS.has(field)) {
      input = h('select', { attrs: { name: field, id } });
      // JupyterLab's own select: the wrapper and caret of @jupyterlab/ui-components' HTMLSelect
      control = h('div', { class: 'jp-HTMLSelect jp-DefaultStyle gpugeek-select' }, [
        input,
        caretDownEmptyIcon.element({ tag: 'span', stylesheet: 'select', right: '4px', top: '4px' })
      ]);
    } else if (field === 'prologue') {
      input = h('textarea', {
        class: 'jp-mod-styled',
        attrs: { name: field, id, rows: '2', spellcheck: 'false', placeholder: PLACEHOLDERS[field]! }
      });
      control = input;
    } else {
      input = h('input', {
        class: 'jp-mod-styled',
        attrs: { name: field, id, type: 'text', autocomplete: 'off', spellcheck: 'false' }
      });
      if (INPUT_MODES[field]) {
        input.setAttribute('inputmode', INPUT_MODES[field]!);
      }
      if (PLACEHOLDERS[field]) {
        input.setAttribute('placeholder', PLACEHOLDERS[field]!);
      }
      control = input;
    }
    const onEdit = (): void => {
      this._touched.add(field);
      // the server's answer was about the values before this change
      this._formError.textContent = '';
      this._revalidate(field);
      if (field === 'gpu_type') {
        this._fillInterconnects();
      }
      if (field === 'backend') {
        this._showBackendFields();
      }
      this._updateEstimate();
    };
    input.addEventListener('input', onEdit);
    input.addEventListener('change', onEdit);
    this._inputs.set(field, input);
    const wrapper = h('div', { class: 'gpugeek-field', data: { field } }, [
      h('label', { text: FIELD_LABELS[field], attrs: { for: id } }),
      control
    ]);
    this._fields.set(field, wrapper);
    return wrapper;
  }

  /** Show the fields of the chosen backend only (a Slurm pool's partition, account, ...). */
  private _showBackendFields(): void {
    const values = this.values();
    for (const [field, wrapper] of this._fields) {
      const applies = fieldApplies(field, values, this._catalog);
      wrapper.hidden = !applies;
      if (!applies) {
        this.setFieldError(field, null);
      }
    }
  }

  /** Each field's help, as the server declares it, on hovering its label. */
  private _showFieldHelp(): void {
    for (const [field, wrapper] of this._fields) {
      const label = wrapper.querySelector('label');
      const help = fieldHelp(field, this._catalog);
      if (label && help) {
        label.title = help;
      }
    }
  }

  private _input(field: LaunchField): FieldInput {
    return this._inputs.get(field)!;
  }

  /** Re-check a field, and the interconnect whenever the GPU type changes. */
  private _revalidate(field: LaunchField): void {
    const values = this.values();
    this.setFieldError(field, validateField(field, values, this._catalog));
    if (field === 'gpu_type') {
      this.setFieldError('interconnect', validateField('interconnect', values, this._catalog));
    }
    if (field === 'count' || field === 'backend') {
      // whether this machine has the GPUs depends on how many, and on a local pool
      this.setFieldError('gpu_type', validateField('gpu_type', values, this._catalog));
    }
  }

  private _setValues(values: ILaunchFormValues, onlyUntouched = false): void {
    for (const field of LAUNCH_FIELDS) {
      if (onlyUntouched && this._touched.has(field)) {
        continue;
      }
      const input = this._input(field);
      if (input instanceof HTMLSelectElement) {
        ensureOption(input, values[field]);
      }
      input.value = values[field];
    }
  }

  private _fillSelects(): void {
    const catalog = this._catalog;
    const gpuOptions = catalog
      ? catalog.gpu_types.map(gpu => ({
          value: gpu.name,
          label:
            `${gpu.name} (${gpu.memory_gb} GB, ${formatUsdPerHour(gpu.prices.on_demand)})` +
            (gpusOnThisMachine(gpu.name, catalog) === 0 ? ' – none on this machine' : '')
        }))
      : [];
    replaceOptions(this._input('gpu_type') as HTMLSelectElement, gpuOptions, catalog ? null : 'catalog loading…');
    const backends = catalog?.backends ?? DEFAULT_BACKENDS;
    replaceOptions(
      this._input('backend') as HTMLSelectElement,
      backends.map(backend => ({ value: backend, label: backend })),
      null
    );
    this._fillInterconnects();
  }

  private _fillInterconnects(): void {
    const select = this._input('interconnect') as HTMLSelectElement;
    const gpu = this._catalog?.gpu_types.find(candidate => candidate.name === this._input('gpu_type').value);
    replaceOptions(
      select,
      [{ value: '', label: 'any' }, ...(gpu?.interconnects ?? []).map(name => ({ value: name, label: name }))],
      null
    );
  }

  private _updateEstimate(): void {
    const values = this.values();
    const gpu = this._catalog?.gpu_types.find(candidate => candidate.name === values.gpu_type);
    const count = Number(values.count);
    const spot = Number(values.spot_fraction);
    if (!gpu || validateField('count', values, this._catalog) || validateField('spot_fraction', values, this._catalog)) {
      this._estimate.textContent = '';
      return;
    }
    const estimate = estimateUsdPerHour(gpu, count, spot);
    this._estimate.textContent =
      `≈ ${formatUsdPerHour(estimate)} at list prices ` +
      `(per GPU-hour: on-demand ${formatUsd(gpu.prices.on_demand)}, spot ${formatUsd(gpu.prices.spot)})`;
  }
}

/** Replace a select's options, keeping its value when it is still offered. */
function replaceOptions(
  select: HTMLSelectElement,
  options: { value: string; label: string }[],
  placeholder: string | null
): void {
  const previous = select.value;
  select.replaceChildren(
    ...(options.length === 0 && placeholder !== null
      ? [h('option', { text: placeholder, attrs: { value: '' } })]
      : options.map(option => h('option', { text: option.label, attrs: { value: option.value } })))
  );
  if (options.some(option => option.value === previous)) {
    select.value = previous;
  }
}

/** A value from the catalog's defaults that the select does not list yet still shows. */
function ensureOption(select: HTMLSelectElement, value: string): void {
  if (value !== '' && ![...select.options].some(option => option.value === value)) {
    select.appendChild(h('option', { text: value, attrs: { value } }));
  }
}
