import type { Express, RequestHandler } from 'express';
import type { Logger } from 'pino';
import type { HubConfig } from '../../config.js';
import type { Pulls } from '../../models/hf/pulls.js';
import type { ModelRegistry } from '../../models/registry.js';
import type { Scheduler } from '../../scheduler/scheduler.js';
import type { NodeManager } from '../../pool/manager.js';
import type { SpareSockets } from '../../llama/spare-sockets.js';
import type { MoveDto, RecentRequest } from '../../../../shared/status.js';
import type { HubMetrics } from '../state/metrics.js';
import type { HubAvailability } from '../state/availability.js';
import type { History } from '../state/history.js';
import type { ApiKeys } from './keys.js';
import type { HubAuth } from './auth.js';
import type { Recent } from '../state/recent.js';
import type { KeyUsage } from '../state/usage.js';
import type { Admission } from './admission.js';
import type { ModelRecord } from '../../store/store.js';
import type { Pieces } from '../../gguf/pieces.js';

/** What the hub's HTTP surface is built from (hub/index.ts assembles it). */
export interface AppDeps {
  readonly config: HubConfig;
  readonly registry: ModelRegistry;
  /** Downloads from Hugging Face (`relay models pull`). */
  readonly pulls: Pulls;
  readonly scheduler: Scheduler;
  readonly nodes: NodeManager;
  readonly metrics: HubMetrics;
  readonly log: Logger;
  readonly version: string;
  readonly llama: { tag: string; version: string; backend: string; backend_reason: string };
  readonly availability: HubAvailability;
  readonly keys: ApiKeys;
  /** Joining is refused on plain HTTP: the token and the credential only cross over TLS. */
  readonly nodesOverTlsOnly?: boolean;
  /** Ready connections to this machine's llama-servers (see spare-sockets.ts); none: a fresh connect each. */
  readonly spares?: SpareSockets;
  /** The CPU budget now (it can change while the hub runs); absent: the config's. */
  readonly cpuBudgetMb?: () => number;
  /** The charts' last minutes (history.ts), for a dashboard opened now. */
  readonly history?: History;
  /** Who used what, per key and day (state/usage.ts), and whether a request may go to the pool now (http/admission.ts). */
  readonly usage: KeyUsage;
  readonly admission: Admission;
  /** A model's tokens as llama-server streams them (gguf/pieces.ts), read once: a moved answer's exact continuation needs them. */
  readonly pieces?: (m: ModelRecord) => Promise<Pieces | null>;
}

/** What every room's routes share: the deps, the JSON body reader, the auth checks, the request log and the moves. */
export interface HubHttp {
  readonly deps: AppDeps;
  /** A JSON body: application/json only (415 otherwise), read up to the size limit. */
  readonly raw: RequestHandler;
  readonly auth: HubAuth;
  readonly recent: Recent<RecentRequest>;
  /** Answers moved mid-stream (pooled.ts). */
  readonly moves: Recent<MoveDto>;
}

/** A group of routes, mounted on the app in the order app.ts gives. */
export type Mount = (app: Express, h: HubHttp) => void;
