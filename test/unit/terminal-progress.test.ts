import assert from 'node:assert/strict';
import { EventEmitter } from 'node:events';
import { describe, it, mock } from 'node:test';
import { formatBar, llamaBuildProgress, showHubPushes, showNodePushes, TerminalProgress } from '../../src/main/cli/progress.js';

class FakeStream {
  out = '';
  constructor(
    readonly isTTY: boolean,
    readonly columns = 200,
  ) {}
  write(s: string): boolean {
    this.out += s;
    return true;
  }
}

describe('terminal progress', () => {
  it('a bar shows the share, the rate and the time left; at the end the time it took', () => {
    const mib = 1048576;
    assert.equal(formatBar({ label: 'push', done: 25 * mib, total: 100 * mib, elapsedMs: 2000, unit: 'bytes', width: 8 }), 'push [##......] 25%  12.5 MB/s  ETA 0:06');
    assert.equal(formatBar({ label: 'build', done: 50, total: 100, elapsedMs: 3_700_000, unit: 'percent', width: 4 }), 'build [##..] 50%  ETA 1:01:40');
    assert.equal(formatBar({ label: 'x', done: 10, total: 10, elapsedMs: 65_000, unit: 'percent', width: 2 }), 'x [##] 100%  done in 1:05');
    assert.equal(formatBar({ label: 'x', done: 5, total: 0, elapsedMs: 0, unit: 'bytes', width: 2 }), 'x [..] 0%', 'an unknown total: no share, no ETA');
    // A push resumed at 60 MiB: the rate and the time left count what moved since.
    assert.equal(formatBar({ label: 'push', done: 80 * mib, total: 100 * mib, base: 60 * mib, elapsedMs: 2000, unit: 'bytes', width: 4 }), 'push [###.] 80%  10.0 MB/s  ETA 0:02');
  });

  it('on a terminal: one line redrawn in place, plain lines above it, a finished line kept', () => {
    let t = 0;
    const s = new FakeStream(true);
    const logged: string[] = [];
    const p = new TerminalProgress(
      s,
      (l) => logged.push(l),
      () => t,
    );
    p.update('a', 'push m → n', 0, 100, 'bytes');
    t = 1000;
    p.update('a', 'push m → n', 50, 100, 'bytes');
    p.line('a message');
    p.finish('a');
    assert.deepEqual(logged, [], 'nothing goes to the log on a terminal');
    const frames = s.out.split('\r\x1b[K').filter(Boolean);
    assert.match(frames[0]!, /^push m → n \[\.+\] 0%$/);
    assert.match(frames[1]!, /^push m → n \[#+\.+\] 50% .* ETA 0:01$/);
    assert.equal(frames[2], 'a message\n');
    assert.match(frames[frames.length - 1]!, /^push m → n \[#+\] 100% .*done in 0:01\n$/);
  });

  it('off a terminal: no control characters, one log line per 10%', () => {
    const s = new FakeStream(false);
    const logged: string[] = [];
    const p = new TerminalProgress(
      s,
      (l) => logged.push(l),
      () => 0,
    );
    for (let pct = 0; pct <= 100; pct++) p.update('b', 'build', pct, 100, 'percent');
    p.finish('b', 'built');
    assert.equal(s.out, '');
    assert.equal(logged.length, 12, logged.join('\n')); // 0%, 10% … 100%, then the outcome
    // eslint-disable-next-line no-control-regex -- the point: no carriage return or escape code off a terminal
    assert.ok(logged.every((l) => !/[\r\x1b]/.test(l)));
  });

  it('the llama.cpp build: cmake percent lines drive the bar, other lines are plain, 100% ends it', () => {
    const s = new FakeStream(true);
    let t = 0;
    const p = new TerminalProgress(
      s,
      () => undefined,
      () => (t += 200),
    ); // redraws are at most ~10 a second
    const feed = llamaBuildProgress(p);
    feed('configuring llama.cpp b1 (cpu + rpc, shared)');
    feed('[  7%] Building C object ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o');
    feed('[ 55%] Building CXX object tools/server/CMakeFiles/llama-server.dir/server.cpp.o');
    feed('[100%] Built target llama-server');
    assert.match(s.out, /\[llama\] configuring llama\.cpp b1 \(cpu \+ rpc, shared\)\n/);
    assert.match(s.out, /\[llama\] building \[#+\.+\] 7%/);
    assert.match(s.out, /\[llama\] building \[#+\.+\] 55%/);
    assert.match(s.out, /\[llama\] built \(Built target llama-server\)\n$/);
  });

  it('redraws at most about ten times a second, but always the last one', () => {
    let t = 0;
    const s = new FakeStream(true);
    const p = new TerminalProgress(
      s,
      () => undefined,
      () => t,
    );
    for (let i = 1; i <= 50; i++) {
      t += 10; // a chunk every 10 ms
      p.update('k', 'push', i, 50, 'bytes');
    }
    const frames = s.out.split('\r\x1b[K').filter(Boolean);
    assert.ok(frames.length <= 7, `${frames.length} redraws in 0.5 s`);
    assert.match(frames[frames.length - 1]!, /100%/);
  });

  it('the hub shows each push in progress (polled) and a finished line when it leaves the list', () => {
    mock.timers.enable({ apis: ['setInterval'] });
    try {
      const s = new FakeStream(true);
      const p = new TerminalProgress(
        s,
        () => undefined,
        () => 0,
      );
      const pushes = [{ node: 'attic', model: 'qwen', sha256: 'a'.repeat(64), done: 10, total: 40 }];
      const stop = showHubPushes(p, () => pushes);
      mock.timers.tick(500);
      assert.match(s.out, /push qwen → attic \[#+\.+\] 25%/);
      pushes.length = 0;
      mock.timers.tick(500);
      assert.match(s.out, /push qwen → attic \[#+\] 100% .*\n$/);
      stop();
    } finally {
      mock.timers.reset();
    }
  });

  it('a node shows what it receives; a push that stops says the hub resumes it', () => {
    const s = new FakeStream(true);
    const p = new TerminalProgress(
      s,
      () => undefined,
      () => 0,
    );
    const agent = new EventEmitter();
    showNodePushes(p, agent);
    agent.emit('push-progress', { sha256: 'b'.repeat(64), done: 5, total: 10 });
    assert.match(s.out, /receiving bbbbbbbbbbbb… \[#+\.+\] 50%/);
    agent.emit('push-end', { sha256: 'b'.repeat(64), ok: false });
    assert.match(s.out, /receiving bbbbbbbbbbbb… stopped \(the hub resumes or retries it\)\n$/);
  });
});
