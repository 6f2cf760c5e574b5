/**
 * Follows the server's status token (`GET /gpugeek/changes`, a long poll) and
 * calls back when it changes, so a stop, a launch or a job's end made anywhere
 * (a notebook, a script, another panel) shows within a quarter second instead
 * of at the next listing.
 */

/** How long one request waits on the server for a change. */
export const CHANGE_WAIT_SECONDS = 25;
/** First pause after a failed request; doubles up to `MAX_RETRY_MS`. */
const FIRST_RETRY_MS = 1000;
const MAX_RETRY_MS = 30 * 1000;
/** Pause between checks while the panel is hidden. */
const IDLE_MS = 1000;

export interface IChangeWatcherOptions {
  /** One long poll: the token once it differs from `since`, or after `waitSeconds`. */
  wait: (since: string | null, waitSeconds: number) => Promise<string>;
  /** Called when the token changed (never for the first token seen). */
  onChange: () => void;
  /** False while nobody looks (hidden panel or tab): no request is sent. */
  isActive?: () => boolean;
  /** Injected for tests. */
  sleep?: (ms: number) => Promise<void>;
}

export class ChangeWatcher {
  private _token: string | null = null;
  private _stopped = false;
  private _running: Promise<void> | null = null;

  constructor(private readonly _options: IChangeWatcherOptions) {}

  /** The last token the server answered. */
  get token(): string | null {
    return this._token;
  }

  start(): void {
    if (this._running === null && !this._stopped) {
      this._running = this._loop();
    }
  }

  /** Stop after the request in flight (its answer is ignored). */
  stop(): Promise<void> {
    this._stopped = true;
    return this._running ?? Promise.resolve();
  }

  private async _loop(): Promise<void> {
    const sleep = this._options.sleep ?? ((ms: number) => new Promise<void>(done => setTimeout(done, ms)));
    let retry = FIRST_RETRY_MS;
    while (!this._stopped) {
      if (this._options.isActive && !this._options.isActive()) {
        await sleep(IDLE_MS);
        continue;
      }
      let token: string;
      try {
        token = await this._options.wait(this._token, CHANGE_WAIT_SECONDS);
      } catch {
        // The panel's own poll shows the outage; this only waits longer each time.
        await sleep(retry);
        retry = Math.min(MAX_RETRY_MS, retry * 2);
        continue;
      }
      retry = FIRST_RETRY_MS;
      if (this._stopped) {
        break;
      }
      const changed = this._token !== null && token !== this._token;
      this._token = token;
      if (changed) {
        this._options.onChange();
      }
    }
  }
}
