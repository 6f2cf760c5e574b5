/**
 * The real transport for `GpugeekApi`: `ServerConnection.makeRequest`
 * adds the base URL, the token and the XSRF header.
 */

import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import { RequestFn } from './api';

export function makeServerRequest(
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): RequestFn {
  return (path, init) =>
    ServerConnection.makeRequest(URLExt.join(settings.baseUrl, path), init, settings);
}
