export * from './argv.js';
export * from './backend-choice.js';
export * from './backends.js';
export * from './devices.js';
export * from './install.js';
export * from './ports.js';
export * from './processes.js';
export * from './supervisor.js';
