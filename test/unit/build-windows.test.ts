import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cmakeFlags } from '../../src/main/core/llama/build.js';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findWindowsLlama, linkHelpersStatically, toolchainFile, windowsCmakeFlags, windowsInstallDir } from '../../src/main/core/llama/build-windows.js';

describe('the Windows cross-build (pure parts)', () => {
  it("takes the Linux build's flags, drops what only ELF has, adds mingw's toolchain and the headers' Windows 10 level", () => {
    const flags = windowsCmakeFlags('/w', true);
    for (const f of cmakeFlags(null, true).filter((x) => !/RPATH|SONAME/.test(x))) assert.ok(flags.includes(f), f);
    assert.ok(!flags.some((f) => /RPATH|SONAME/.test(f)), flags.join(' '));
    assert.ok(flags.includes('-DCMAKE_TOOLCHAIN_FILE=/w/mingw64.cmake'));
    assert.ok(flags.includes('-DCMAKE_C_FLAGS=-D_WIN32_WINNT=0x0A00 -include /w/mingw-compat.h'));
    assert.ok(flags.includes('-DGGML_BACKEND_DL=ON') && flags.includes('-DGGML_RPC=ON') && flags.includes('-DBUILD_SHARED_LIBS=ON'));
    assert.match(toolchainFile(), /CMAKE_SYSTEM_NAME Windows[\s\S]*x86_64-w64-mingw32-g\+\+-posix/);
  });
  it('is cached per tag beside the Linux build; an empty cache has none', () => {
    const env = { RELAY_CACHE_DIR: '/nonexistent-cache' };
    assert.match(windowsInstallDir(env), /llama\.cpp\/v[\d.]+-win64$/);
    assert.equal(findWindowsLlama(env), null);
  });
  it("links llama-common and llama-server-impl into the programs (a DLL's thread joined at exit hangs), once", () => {
    const src = mkdtempSync(join(tmpdir(), 'relay-llsrc-'));
    mkdirSync(join(src, 'common'));
    mkdirSync(join(src, 'tools', 'server'), { recursive: true });
    writeFileSync(join(src, 'common', 'CMakeLists.txt'), 'set(TARGET llama-common)\n\nadd_library(${TARGET}\n    arg.cpp\n    arg.h\n)\n');
    writeFileSync(join(src, 'tools', 'server', 'CMakeLists.txt'), 'add_library(${TARGET}\n    server.cpp\n)\n');
    linkHelpersStatically(src);
    linkHelpersStatically(src); // a second run (a cached source) changes nothing
    assert.equal(readFileSync(join(src, 'common', 'CMakeLists.txt'), 'utf8'), 'set(TARGET llama-common)\n\nadd_library(${TARGET} STATIC\n    arg.cpp\n    arg.h\n)\n');
    assert.equal(readFileSync(join(src, 'tools', 'server', 'CMakeLists.txt'), 'utf8'), 'add_library(${TARGET} STATIC\n    server.cpp\n)\n');
    writeFileSync(join(src, 'tools', 'server', 'CMakeLists.txt'), 'add_library(other server.cpp)\n');
    assert.throws(() => linkHelpersStatically(src), /llama\.cpp changed/);
  });
});
