import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { ErrorCode, RelayError } from '../../../shared/errors.js';
import { processEnv } from '../config.js';
import { cmakeFlags, fetchSource, withLock } from './build.js';
import { cacheRoot, run, type Progress } from './fetch.js';
import { LLAMA_SOURCE } from './install.js';

/**
 * Windows binaries without a Windows toolchain: llama-server.exe, ggml-rpc-server.exe and their DLLs
 * cross-built on Linux from the same pinned source with Debian's mingw-w64 (posix threads), the same shared
 * layout as the Linux build (loadable backends, one portable CPU module, RPC), into
 * `<cache>/llama.cpp/<tag>-win64/bin/` with the mingw runtime DLLs beside them, so the folder is relocatable.
 * A Windows `relay up` runs these and never compiles. (LLAMA-NOTES: two gaps of mingw-w64 10's headers.)
 */
export const WIN_LAYOUT = 'win64';
export const MINGW = { cc: 'x86_64-w64-mingw32-gcc-posix', cxx: 'x86_64-w64-mingw32-g++-posix', windres: 'x86_64-w64-mingw32-windres' } as const;
/** The mingw runtime the DLLs import (gcc's posix flavour): shipped beside them. */
export const MINGW_RUNTIME = ['libstdc++-6.dll', 'libgcc_s_seh-1.dll', 'libwinpthread-1.dll'] as const;

export function windowsInstallDir(env: NodeJS.ProcessEnv = processEnv()): string {
  return join(cacheRoot(env), 'llama.cpp', `${LLAMA_SOURCE.tag}-${WIN_LAYOUT}`);
}

/** The cached Windows build, or null when it was never built (or is incomplete). */
export function findWindowsLlama(env: NodeJS.ProcessEnv = processEnv()): { dir: string; server: string; rpc: string } | null {
  const dir = join(windowsInstallDir(env), 'bin');
  const server = join(dir, 'llama-server.exe');
  const rpc = join(dir, 'ggml-rpc-server.exe');
  const complete = [server, rpc, join(windowsInstallDir(env), 'install.json'), ...MINGW_RUNTIME.map((f) => join(dir, f))].every((f) => existsSync(f));
  return complete ? { dir, server, rpc } : null;
}

/**
 * mingw-w64 10 lacks THREAD_POWER_THROTTLING_STATE, which ggml-cpu.c uses at _WIN32_WINNT 0x0A00 (cpp-httplib
 * needs that level): defined here for the C files, forced in before anything else.
 */
const COMPAT_H = `#pragma once
#ifdef _WIN32
#include <windows.h>
#ifndef THREAD_POWER_THROTTLING_CURRENT_VERSION
typedef struct _THREAD_POWER_THROTTLING_STATE { ULONG Version; ULONG ControlMask; ULONG StateMask; } THREAD_POWER_THROTTLING_STATE;
#define THREAD_POWER_THROTTLING_CURRENT_VERSION 1
#define THREAD_POWER_THROTTLING_EXECUTION_SPEED 0x1
#endif
#endif
`;

export function toolchainFile(): string {
  return [
    'set(CMAKE_SYSTEM_NAME Windows)',
    'set(CMAKE_SYSTEM_PROCESSOR x86_64)',
    `set(CMAKE_C_COMPILER ${MINGW.cc})`,
    `set(CMAKE_CXX_COMPILER ${MINGW.cxx})`,
    `set(CMAKE_RC_COMPILER ${MINGW.windres})`,
    'set(CMAKE_FIND_ROOT_PATH /usr/x86_64-w64-mingw32)',
    'set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)',
    'set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)',
    'set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)',
    '',
  ].join('\n');
}

/** The Linux build's flags, minus what only applies there (rpath, versioned sonames), plus the cross toolchain. */
export function windowsCmakeFlags(work: string, useCcache: boolean): string[] {
  const linuxOnly = /^-D(CMAKE_INSTALL_RPATH|CMAKE_BUILD_WITH_INSTALL_RPATH|CMAKE_PLATFORM_NO_VERSIONED_SONAME)=/;
  return [
    ...cmakeFlags(null, useCcache).filter((f) => !linuxOnly.test(f)),
    '-G',
    'Ninja',
    `-DCMAKE_TOOLCHAIN_FILE=${join(work, 'mingw64.cmake')}`,
    `-DCMAKE_C_FLAGS=-D_WIN32_WINNT=0x0A00 -include ${join(work, 'mingw-compat.h')}`,
    '-DCMAKE_CXX_FLAGS=-D_WIN32_WINNT=0x0A00',
    '-DLLAMA_CURL=OFF',
    '-DGGML_OPENMP=OFF',
  ];
}

/**
 * llama-common and llama-server-impl as static libraries inside the programs, not DLLs. As DLLs, their static
 * objects (the log's worker thread) are destroyed when the DLL is detached at process exit, after Windows has
 * already ended every other thread; winpthreads' join then waits for ever, so `llama-server.exe --version`
 * printed its version and never exited (seen under Wine). In the program, the destructors run from exit()
 * while the threads still live. ggml and libllama stay DLLs (the GPU modules link against ggml-base.dll).
 */
export function linkHelpersStatically(src: string): void {
  for (const [file, first] of [
    ['common/CMakeLists.txt', 'arg.cpp'],
    ['tools/server/CMakeLists.txt', 'server.cpp'],
  ] as const) {
    const path = join(src, file);
    const text = readFileSync(path, 'utf8');
    const from = new RegExp(`add_library\\(\\$\\{TARGET\\}\\s*\\n(\\s*)${first.replace('.', '\\.')}`);
    if (text.includes(`add_library(\${TARGET} STATIC\n`) && !from.test(text)) continue;
    if (!from.test(text)) throw new RelayError(ErrorCode.LLAMA_BUILD_FAILED, `${file}: the library definition to link statically was not found (llama.cpp changed?)`);
    writeFileSync(
      path,
      text.replace(from, (_m, indent: string) => `add_library(\${TARGET} STATIC\n${indent}${first}`),
    );
  }
}

/** Where gcc keeps a runtime DLL of the mingw toolchain (asked of the compiler itself). */
function runtimeDll(name: string): string {
  const r = spawnSync(MINGW.cxx, [`-print-file-name=${name}`], { encoding: 'utf8', windowsHide: true });
  const p = (r.stdout ?? '').trim();
  if (p && existsSync(p)) return p;
  const pthread = '/usr/x86_64-w64-mingw32/lib/libwinpthread-1.dll';
  if (name === 'libwinpthread-1.dll' && existsSync(pthread)) return pthread;
  throw new RelayError(ErrorCode.LLAMA_BUILD_FAILED, `the mingw runtime ${name} was not found (install g++-mingw-w64-x86-64-posix)`);
}

/** `relay llama build --windows`: cross-build once per tag into the cache; returns the bin folder. */
export async function buildWindows(opts: { env?: NodeJS.ProcessEnv; progress?: Progress; jobs?: number } = {}): Promise<string> {
  const env = opts.env ?? processEnv();
  const progress = opts.progress ?? ((l: string) => process.stderr.write(`${l}\n`));
  const found = findWindowsLlama(env);
  if (found) return found.dir;
  if (spawnSync(MINGW.cxx, ['--version'], { stdio: 'ignore', windowsHide: true }).status !== 0) {
    throw new RelayError(ErrorCode.LLAMA_BUILD_FAILED, `no ${MINGW.cxx}: install Debian's g++-mingw-w64-x86-64-posix (and ninja-build) to cross-build for Windows`);
  }
  const dir = windowsInstallDir(env);
  mkdirSync(join(cacheRoot(env), 'llama.cpp'), { recursive: true });
  await withLock(`${dir}.lock`, progress, async () => {
    if (findWindowsLlama(env)) return;
    const work = join(cacheRoot(env), 'llama.cpp', '.work', `${LLAMA_SOURCE.tag}-${WIN_LAYOUT}`);
    const src = await fetchSource(work, progress);
    linkHelpersStatically(src);
    writeFileSync(join(work, 'mingw64.cmake'), toolchainFile());
    writeFileSync(join(work, 'mingw-compat.h'), COMPAT_H);
    const build = join(work, 'build');
    const useCcache = spawnSync('ccache', ['--version'], { stdio: 'ignore', windowsHide: true }).status === 0;
    const buildEnv = { ...processEnv(), CCACHE_BASEDIR: work };
    progress(`configuring llama.cpp ${LLAMA_SOURCE.tag} for Windows x64 (mingw-w64, cpu + rpc, shared${useCcache ? ', ccache' : ''})`);
    await run('cmake', ['-S', src, '-B', build, ...windowsCmakeFlags(work, useCcache)], { env: buildEnv, progress, filter: (l) => /error|not found/i.test(l) });
    const j = opts.jobs ?? availableParallelism();
    progress(`building llama-server.exe, ggml-rpc-server.exe with ${j} jobs (about 7 minutes on 2 cores without a ccache hit)`);
    await run('cmake', ['--build', build, '-j', String(j), '--target', 'llama-server', 'ggml-rpc-server', 'ggml-cpu'], { env: buildEnv, progress, filter: (l) => /error/i.test(l) });
    const stage = `${dir}.staging-${process.pid}`;
    rmSync(stage, { recursive: true, force: true });
    mkdirSync(join(stage, 'bin'), { recursive: true });
    const built = join(build, 'bin');
    const shipped = readdirSync(built).filter((f) => /\.(exe|dll)$/i.test(f) && (f.endsWith('.dll') || f === 'llama-server.exe' || f === 'ggml-rpc-server.exe'));
    for (const f of shipped) copyFileSync(join(built, f), join(stage, 'bin', f));
    for (const f of MINGW_RUNTIME) copyFileSync(runtimeDll(f), join(stage, 'bin', f));
    writeFileSync(
      join(stage, 'install.json'),
      `${JSON.stringify({ tag: LLAMA_SOURCE.tag, layout: WIN_LAYOUT, target: 'x86_64-w64-mingw32', sourcePackage: `${LLAMA_SOURCE.package}@${LLAMA_SOURCE.version}`, files: [...shipped, ...MINGW_RUNTIME].sort(), builtAt: new Date().toISOString() }, null, 2)}\n`,
    );
    rmSync(dir, { recursive: true, force: true });
    renameSync(stage, dir);
    rmSync(work, { recursive: true, force: true });
    progress(`installed ${dir}`);
  });
  const done = findWindowsLlama(env);
  if (!done) throw new RelayError(ErrorCode.LLAMA_BUILD_FAILED, `the Windows build finished but ${dir} is incomplete`);
  return done.dir;
}
