// node --import ./register.js dist/src/main/electron/main.js: runs relay's Electron shell on the stand-in.
import { register } from 'node:module';

register('./hooks.js', import.meta.url);
