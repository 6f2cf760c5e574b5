import { ChangeWatcher } from '../src/changes';

/** A server whose answers the test hands out one at a time. */
class FakeChangesServer {
  readonly calls: (string | null)[] = [];
  private _answers: ((token: string) => void)[] = [];
  private _failures: ((error: Error) => void)[] = [];

  wait = (since: string | null): Promise<string> => {
    this.calls.push(since);
    return new Promise<string>((resolve, reject) => {
      this._answers.push(resolve);
      this._failures.push(reject);
    });
  };

  async answer(token: string): Promise<void> {
    this._failures.shift();
    this._answers.shift()!(token);
    await flush();
  }

  async fail(): Promise<void> {
    this._answers.shift();
    this._failures.shift()!(new Error('no answer'));
    await flush();
  }
}

async function flush(): Promise<void> {
  for (let i = 0; i < 5; i++) {
    await Promise.resolve();
  }
}

describe('ChangeWatcher', () => {
  it('calls back when the token changes, not for the first token, and sends the last one', async () => {
    const server = new FakeChangesServer();
    const onChange = jest.fn();
    const watcher = new ChangeWatcher({ wait: server.wait, onChange, sleep: () => Promise.resolve() });
    watcher.start();
    await flush();
    await server.answer('a');
    expect(onChange).not.toHaveBeenCalled();
    await server.answer('a'); // the wait ran out with nothing new
    expect(onChange).not.toHaveBeenCalled();
    await server.answer('b'); // a pool stopped
    expect(onChange).toHaveBeenCalledTimes(1);
    expect(server.calls).toEqual([null, 'a', 'a', 'b']);
    const stopped = watcher.stop();
    await server.answer('c');
    await stopped;
    expect(onChange).toHaveBeenCalledTimes(1); // an answer after stop is ignored
  });

  it('waits longer after each failure and sends nothing while inactive', async () => {
    const server = new FakeChangesServer();
    const pauses: number[] = [];
    let active = true;
    const watcher = new ChangeWatcher({
      wait: server.wait,
      onChange: () => undefined,
      isActive: () => active,
      sleep: ms => {
        pauses.push(ms);
        return Promise.resolve();
      }
    });
    watcher.start();
    await flush();
    await server.fail();
    await server.fail();
    expect(pauses).toEqual([1000, 2000]);
    active = false;
    await server.answer('a');
    expect(server.calls).toHaveLength(3); // no request while hidden, only idle pauses
    expect(pauses.slice(2).every(ms => ms === 1000)).toBe(true);
    await watcher.stop();
  });
});
