import { dashboardHref, showsDashboard } from '../src/poolView';
import { makePool } from './fixtures';

describe('dashboardHref', () => {
  it("opens a local pool's dashboard at the server's own route, under its base URL", () => {
    const route = 'gpugeek/pools/dev/dashboard/status';
    const pool = makePool({ dashboard_link: route, dashboard_path: route });
    expect(dashboardHref(pool, '/user/ada/')).toBe('/user/ada/gpugeek/pools/dev/dashboard/status');
  });

  it('goes through the Jupyter server proxy when the server offers it', () => {
    const pool = makePool({
      dashboard_link: 'http://127.0.0.1:8787/status',
      dashboard_path: 'proxy/8787/status'
    });
    expect(dashboardHref(pool, '/user/ada/')).toBe('/user/ada/proxy/8787/status');
  });

  it('keeps the direct link without a proxy', () => {
    const pool = makePool({ dashboard_link: 'http://10.0.0.5:8787/status', dashboard_path: null });
    expect(dashboardHref(pool, '/')).toBe('http://10.0.0.5:8787/status');
  });
});

describe('showsDashboard', () => {
  it('links a starting or ready pool, never a stopping or ended one', () => {
    const link = { dashboard_link: 'gpugeek/pools/dev/dashboard/status' };
    expect(showsDashboard(makePool({ ...link, status: 'ready' }))).toBe(true);
    expect(showsDashboard(makePool({ ...link, status: 'stopping' }))).toBe(false);
    expect(showsDashboard(makePool({ ...link, status: 'stopped' }))).toBe(false);
    expect(showsDashboard(makePool({ dashboard_link: null, status: 'ready' }))).toBe(false);
  });
});
