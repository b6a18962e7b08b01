import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { cmakeFlags } from '../../src/main/core/llama/build.js';
import { findWindowsLlama, toolchainFile, windowsCmakeFlags, windowsInstallDir } from '../../src/main/core/llama/build-windows.js';

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
});
