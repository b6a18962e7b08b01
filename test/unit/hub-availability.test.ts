import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import pino from 'pino';
import { HubAvailability } from '../../src/main/core/hub/state/availability.js';
import { Store } from '../../src/main/core/store/store.js';

/** The hub's own devices: pause toggle, schedule and their persistence, with a clock the test sets. */
describe('hub availability', () => {
  const log = pino({ level: 'silent' });

  it('the toggle pauses (once per change), persists in relay.json and resumes; busy while streams run', async () => {
    const home = mkdtempSync(join(tmpdir(), 'relay-hubav-'));
    const store = await Store.open(home);
    const paused: string[] = [];
    let streams = 0;
    const a = new HubAvailability({ store, log, activeStreams: () => streams, ownPids: () => new Set(), onPaused: (r) => paused.push(r), tickMs: 60_000 });
    assert.deepEqual(a.state(), { state: 'idle', reason: null });
    streams = 1;
    assert.equal(a.state().state, 'busy');
    await a.set({ paused: true });
    a.tick();
    assert.deepEqual(paused, ['paused by the owner'], 'one onPaused per transition');
    await a.close();
    await store.close();
    // A restarted hub remembers the toggle.
    const again = await Store.open(home);
    const b = new HubAvailability({ store: again, log, activeStreams: () => 0, ownPids: () => new Set(), onPaused: () => undefined, tickMs: 60_000 });
    assert.deepEqual([b.paused(), b.state().reason], [true, 'paused by the owner']);
    await b.set({ paused: false });
    assert.equal(b.paused(), false);
    await b.close();
    await again.close();
  });

  it('a schedule window pauses inside it and not outside; a flag given at start overrides the stored one; a bad one is refused', async () => {
    const store = await Store.open(mkdtempSync(join(tmpdir(), 'relay-hubav-')));
    let now = new Date(2026, 10, 30, 10, 0); // a Monday, 10:00 local time
    const paused: string[] = [];
    const a = new HubAvailability(
      { store, log, activeStreams: () => 0, ownPids: () => new Set(), onPaused: (r) => paused.push(r), tickMs: 60_000, now: () => now },
      { schedule: 'mon-fri 09:00-17:30' },
    );
    assert.deepEqual(a.state(), { state: 'paused', reason: 'outside the sharing schedule' });
    assert.deepEqual(paused, ['outside the sharing schedule']);
    now = new Date(2026, 10, 30, 18, 0);
    a.tick();
    assert.equal(a.state().state, 'idle');
    assert.equal(a.settings().schedule, 'mon-fri 09:00-17:30');
    await assert.rejects(a.set({ schedule: 'someday 25:00-26:00' }), /hub schedule: /);
    assert.equal(a.settings().schedule, 'mon-fri 09:00-17:30', 'a refused schedule changes nothing');
    await a.close();
    assert.equal(store.data.hub_availability?.schedule, 'mon-fri 09:00-17:30', 'the flag was stored');
    await store.close();
  });
});
