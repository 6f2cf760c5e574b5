/**
 * Client for the gpugeek_jupyter server extension's REST routes.
 *
 * The transport is injected (`RequestFn`), so this module has no runtime
 * dependency on JupyterLab and is tested with plain `Response` objects;
 * `request.ts` supplies the real one built on `ServerConnection`.
 */

import {
  ICatalog,
  IJobModel,
  IJobOutput,
  ILaunchRequest,
  IPoolMetrics,
  IPoolModel,
  IPoolPage,
  IQuotaStatus,
  IWhereReport
} from './models';
import { IScheduleModel, ScheduleAction } from './scheduleRows';
import { IJobMetrics } from './jobMetricsModel';

/** Sends a request to a path relative to the server's base URL. */
export type RequestFn = (path: string, init: RequestInit) => Promise<Response>;

/** The URL namespace of the server extension's routes. */
export const API_NAMESPACE = 'gpugeek';

/** A failed call: an HTTP error answer, or no answer at all (`status` 0). */
export class GpugeekApiError extends Error {
  constructor(
    message: string,
    readonly status: number,
    /** The POST body key the server blamed, when it named one. */
    readonly field: string | null = null,
    /** A 404 that did not come from the extension: its routes are not loaded. */
    readonly routeMissing = false
  ) {
    super(message);
    this.name = 'GpugeekApiError';
  }

  /** True when the server did not answer (network down, server stopped). */
  get isUnreachable(): boolean {
    return this.status === 0;
  }
}

export class GpugeekApi {
  constructor(private readonly request: RequestFn) {}

  async listPools(): Promise<IPoolModel[]> {
    const body = await this.call<{ pools: IPoolModel[] }>('GET', 'pools');
    return body.pools;
  }

  /**
   * One page of history, newest first: every ended record with an id below
   * `before` (from the top without it); `next` is the following page's `before`.
   */
  async listEndedPools(before: number | null, limit: number): Promise<IPoolPage> {
    const query = new URLSearchParams({ state: 'ended', limit: String(limit) });
    if (before !== null) {
      query.set('before', String(before));
    }
    const body = await this.call<{ pools: IPoolModel[]; next?: number | null }>(
      'GET',
      `pools?${query.toString()}`
    );
    return { pools: body.pools, next: body.next ?? null };
  }

  async launchPool(launch: ILaunchRequest): Promise<IPoolModel> {
    const body = await this.call<{ pool: IPoolModel }>('POST', 'pools', launch);
    return body.pool;
  }

  async stopPool(name: string): Promise<IPoolModel> {
    const body = await this.call<{ pool: IPoolModel }>(
      'DELETE',
      `pools/${encodeURIComponent(name)}`
    );
    return body.pool;
  }

  /**
   * The newest sample of each GPU (or CPU worker) of pool `name`; with `since`
   * (seconds since the epoch), every sample the workers keep that is newer.
   */
  async poolMetrics(name: string, since?: number): Promise<IPoolMetrics> {
    const query = since === undefined ? '' : `?since=${since}`;
    return this.call<IPoolMetrics>('GET', `pools/${encodeURIComponent(name)}/metrics${query}`);
  }

  async listJobs(): Promise<IJobModel[]> {
    const body = await this.call<{ jobs: IJobModel[] }>('GET', 'jobs');
    return body.jobs;
  }

  async getJob(id: string): Promise<IJobModel> {
    const body = await this.call<{ job: IJobModel }>('GET', `jobs/${encodeURIComponent(id)}`);
    return body.job;
  }

  /**
   * Where each rank of a running job is now (the workers have 5 s each to
   * answer); a job that is not running is a 409 `GpugeekApiError`.
   */
  async jobWhere(id: string): Promise<IWhereReport> {
    const body = await this.call<{ where: IWhereReport }>(
      'GET',
      `jobs/${encodeURIComponent(id)}/where`
    );
    return body.where;
  }

  /** Cancel a detached job (`DELETE /gpugeek/jobs/{id}`): the job as it is then. */
  async cancelJob(id: string): Promise<IJobModel> {
    const body = await this.call<{ job: IJobModel }>('DELETE', `jobs/${encodeURIComponent(id)}`);
    return body.job;
  }

  /**
   * Pause, resume or delete a schedule (`POST .../pause`, `POST .../resume`,
   * `DELETE`); the schedule as it is then.
   */
  async actOnSchedule(id: string, action: ScheduleAction): Promise<IScheduleModel> {
    const path = `schedules/${encodeURIComponent(id)}`;
    const body =
      action === 'delete'
        ? await this.call<{ schedule: IScheduleModel }>('DELETE', path)
        : await this.call<{ schedule: IScheduleModel }>('POST', `${path}/${action}`);
    return body.schedule;
  }

  /** The ranks' states and the last `lines` lines of their output, grouped (read from the job's logs). */
  /** The caller's quota and what counts against it (the panel's quota line). */
  async quota(): Promise<IQuotaStatus> {
    return this.call<IQuotaStatus>('GET', 'quota');
  }

  /**
   * The values job `id`'s ranks logged with `gg.log`, as kept with the job; with `points`, each
   * line (attempt, rank, metric) thinned by the server to at most that many rows, for a chart.
   */
  async jobMetrics(id: string, points?: number): Promise<IJobMetrics> {
    const query = points === undefined ? '' : `?points=${points}`;
    return this.call<IJobMetrics>('GET', `jobs/${encodeURIComponent(id)}/metrics${query}`);
  }

  async jobOutput(id: string, lines?: number): Promise<IJobOutput> {
    const query = lines === undefined ? '' : `?lines=${lines}`;
    return this.call<IJobOutput>('GET', `jobs/${encodeURIComponent(id)}/output${query}`);
  }

  /**
   * The registry's status token once it differs from `since` (a pool or job
   * added, changed status or ended), or after `waitSeconds`: a long poll.
   */
  async waitForChange(since: string | null, waitSeconds: number): Promise<string> {
    const query = new URLSearchParams({ wait: String(waitSeconds) });
    if (since !== null) {
      query.set('since', since);
    }
    const body = await this.call<{ token: string }>('GET', `changes?${query.toString()}`);
    return body.token;
  }

  async getCatalog(): Promise<ICatalog> {
    return this.call<ICatalog>('GET', 'catalog');
  }

  private async call<T>(method: string, route: string, payload?: unknown): Promise<T> {
    const path = `${API_NAMESPACE}/${route}`;
    const init: RequestInit = { method };
    if (payload !== undefined) {
      init.body = JSON.stringify(payload);
      init.headers = { 'Content-Type': 'application/json' };
    }
    let response: Response;
    try {
      response = await this.request(path, init);
    } catch (error) {
      throw new GpugeekApiError(
        `${method} /${path}: no answer from the Jupyter server (${describe(error)})`,
        0
      );
    }
    const text = await response.text();
    const body = parseJson(text);
    if (!response.ok) {
      throw errorFromResponse(method, path, response, body);
    }
    if (body === undefined || body === null || typeof body !== 'object') {
      throw new GpugeekApiError(
        `${method} /${path} answered ${response.status} without a JSON object`,
        response.status
      );
    }
    return body as T;
  }
}

function parseJson(text: string): unknown {
  if (text === '') {
    return undefined;
  }
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

function errorFromResponse(
  method: string,
  path: string,
  response: Response,
  body: unknown
): GpugeekApiError {
  const json = (body && typeof body === 'object' ? body : {}) as {
    message?: unknown;
    field?: unknown;
  };
  const field = typeof json.field === 'string' ? json.field : null;
  const message =
    typeof json.message === 'string' && json.message !== ''
      ? json.message
      : `${method} /${path} answered ${response.status} ${response.statusText}`.trim();
  // The extension always answers JSON; a 404 without a message comes from
  // Jupyter Server itself, which has no such route.
  const routeMissing = response.status === 404 && typeof json.message !== 'string';
  return new GpugeekApiError(message, response.status, field, routeMissing);
}
