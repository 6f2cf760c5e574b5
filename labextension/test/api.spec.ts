import { GpugeekApi, GpugeekApiError, RequestFn } from '../src/api';
import { CATALOG, makeJob, makeJobOutput, makePool, makeWhereReport } from './fixtures';

interface IRecordedCall {
  path: string;
  method: string;
  body: unknown;
}

/** A transport that answers from a list and records what was asked. */
function fakeServer(...answers: (Response | Error)[]): { api: GpugeekApi; calls: IRecordedCall[] } {
  const calls: IRecordedCall[] = [];
  const request: RequestFn = async (path, init) => {
    calls.push({
      path,
      method: init.method ?? 'GET',
      body: init.body === undefined ? undefined : JSON.parse(String(init.body))
    });
    const answer = answers.shift();
    if (answer === undefined) {
      throw new Error('unexpected request');
    }
    if (answer instanceof Error) {
      throw answer;
    }
    return answer;
  };
  return { api: new GpugeekApi(request), calls };
}

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { 'Content-Type': 'application/json' }
  });
}

describe('GpugeekApi', () => {
  it('lists pools from GET gpugeek/pools', async () => {
    const pool = makePool();
    const { api, calls } = fakeServer(json({ pools: [pool] }));
    await expect(api.listPools()).resolves.toEqual([pool]);
    expect(calls).toEqual([{ path: 'gpugeek/pools', method: 'GET', body: undefined }]);
  });

  it('pages through ended pools with state=ended, limit and the before cursor', async () => {
    const pool = makePool({ status: 'failed', ended_at: '2026-11-30T09:00:00Z' });
    const { api, calls } = fakeServer(json({ pools: [pool], next: 41 }), json({ pools: [], next: null }));
    await expect(api.listEndedPools(null, 25)).resolves.toEqual({ pools: [pool], next: 41 });
    await expect(api.listEndedPools(41, 25)).resolves.toEqual({ pools: [], next: null });
    expect(calls.map(call => call.path)).toEqual([
      'gpugeek/pools?state=ended&limit=25',
      'gpugeek/pools?state=ended&limit=25&before=41'
    ]);
  });

  it('launches with a JSON POST body and returns the new pool', async () => {
    const pool = makePool({ status: 'starting' });
    const { api, calls } = fakeServer(json({ pool }, 201));
    const launch = {
      gpu_type: 'A100',
      count: 4,
      backend: 'local' as const,
      spot_fraction: 0.5,
      budget: null,
      idle_timeout: 30,
      name: 'pool-1'
    };
    await expect(api.launchPool(launch)).resolves.toEqual(pool);
    expect(calls).toEqual([{ path: 'gpugeek/pools', method: 'POST', body: launch }]);
  });

  it('carries the field the server blamed on a 400', async () => {
    const message = "count must be a positive integer, got '0' (e.g. count=4)";
    const { api } = fakeServer(json({ message, field: 'count' }, 400));
    const error = await api.launchPool({} as never).catch(e => e);
    expect(error).toBeInstanceOf(GpugeekApiError);
    expect(error).toMatchObject({ message, status: 400, field: 'count', routeMissing: false });
  });

  it('stops a pool with DELETE and escapes its name', async () => {
    const pool = makePool({ name: 'a b', status: 'stopping' });
    const { api, calls } = fakeServer(json({ pool }));
    await expect(api.stopPool('a b')).resolves.toEqual(pool);
    expect(calls[0]).toMatchObject({ path: 'gpugeek/pools/a%20b', method: 'DELETE' });
  });

  it('pauses and resumes a schedule with POST and deletes it with DELETE, escaping its id', async () => {
    const schedule = { id: 'sched 1', name: 'daily', status: 'paused' };
    const { api, calls } = fakeServer(json({ schedule }), json({ schedule }), json({ schedule }));
    await expect(api.actOnSchedule('sched 1', 'pause')).resolves.toEqual(schedule);
    await api.actOnSchedule('sched 1', 'resume');
    await api.actOnSchedule('sched 1', 'delete');
    expect(calls.map(c => [c.method, c.path])).toEqual([
      ['POST', 'gpugeek/schedules/sched%201/pause'],
      ['POST', 'gpugeek/schedules/sched%201/resume'],
      ['DELETE', 'gpugeek/schedules/sched%201']
    ]);
  });

  it("passes on the extension's 404 message for an unknown pool", async () => {
    const { api } = fakeServer(json({ message: "no pool named 'nope'" }, 404));
    await expect(api.stopPool('nope')).rejects.toMatchObject({
      status: 404,
      message: "no pool named 'nope'",
      routeMissing: false
    });
  });

  it('recognises a 404 from Jupyter Server itself as a missing route', async () => {
    const { api } = fakeServer(new Response('<html>404 : Not Found</html>', { status: 404, statusText: 'Not Found' }));
    await expect(api.listPools()).rejects.toMatchObject({
      status: 404,
      routeMissing: true,
      message: 'GET /gpugeek/pools answered 404 Not Found'
    });
  });

  it('reports an unreachable server as status 0', async () => {
    const { api } = fakeServer(new TypeError('Failed to fetch'));
    await expect(api.listJobs()).rejects.toMatchObject({
      status: 0,
      message: 'GET /gpugeek/jobs: no answer from the Jupyter server (Failed to fetch)'
    });
  });

  it('rejects a 200 whose body is not JSON', async () => {
    const { api } = fakeServer(new Response('oops', { status: 200 }));
    await expect(api.getCatalog()).rejects.toMatchObject({ status: 200 });
  });

  it('reads jobs, one job record, metrics and the catalog', async () => {
    const job = makeJob();
    const metrics = { samples: [{ worker: 'w0', sm_util: 50 }], reason: null };
    const { api, calls } = fakeServer(
      json({ jobs: [job] }),
      json({ job }),
      json(metrics),
      json(metrics),
      json(CATALOG)
    );
    await expect(api.listJobs()).resolves.toEqual([job]);
    await expect(api.getJob('job-1')).resolves.toEqual(job);
    await expect(api.poolMetrics('pool-1')).resolves.toEqual(metrics);
    await expect(api.poolMetrics('pool-1', 1796000000.5)).resolves.toEqual(metrics);
    await expect(api.getCatalog()).resolves.toEqual(CATALOG);
    expect(calls.map(call => call.path)).toEqual([
      'gpugeek/jobs',
      'gpugeek/jobs/job-1',
      'gpugeek/pools/pool-1/metrics',
      'gpugeek/pools/pool-1/metrics?since=1796000000.5',
      'gpugeek/catalog'
    ]);
  });

  it('asks where a running job is with GET gpugeek/jobs/<id>/where', async () => {
    const where = makeWhereReport();
    const { api, calls } = fakeServer(json({ where }));
    await expect(api.jobWhere('job 1')).resolves.toEqual(where);
    expect(calls).toEqual([
      { path: 'gpugeek/jobs/job%201/where', method: 'GET', body: undefined }
    ]);
  });

  it("passes on the server's 409 for a job that is not running", async () => {
    const message =
      'job "job-1" is not running (it is succeeded): its ranks can be shown only while it runs';
    const { api } = fakeServer(json({ message, field: null }, 409));
    await expect(api.jobWhere('job-1')).rejects.toMatchObject({ status: 409, message });
  });

  it("reads a job's ranks' states and grouped tail with GET gpugeek/jobs/<id>/output", async () => {
    const output = makeJobOutput();
    const { api, calls } = fakeServer(json(output), json(output));
    await expect(api.jobOutput('job 1')).resolves.toEqual(output);
    await expect(api.jobOutput('job-1', 100)).resolves.toEqual(output);
    expect(calls.map(call => call.path)).toEqual([
      'gpugeek/jobs/job%201/output',
      'gpugeek/jobs/job-1/output?lines=100'
    ]);
  });

  it("reads a job's metrics whole, or thinned for a chart with ?points", async () => {
    const metrics = { job: 'job-1', status: 'running', names: [], metrics: [] };
    const { api, calls } = fakeServer(json(metrics), json(metrics));
    await expect(api.jobMetrics('job 1')).resolves.toEqual(metrics);
    await expect(api.jobMetrics('job-1', 400)).resolves.toEqual(metrics);
    expect(calls.map(call => call.path)).toEqual([
      'gpugeek/jobs/job%201/metrics',
      'gpugeek/jobs/job-1/metrics?points=400'
    ]);
  });
});
