#!/usr/bin/env bash
# System packages relay's build and test suite need (Debian/Ubuntu). Installs only what is missing.
#   cmake g++ git ccache  build llama-server / ggml-rpc-server from the pinned llama.cpp source
#   python3-numpy         llama.cpp's gguf-py, the test suite's independent GGUF oracle
#   util-linux            setpriv: children die with their parent (PDEATHSIG)
#   golang-go, golang-github-hashicorp-yamux-dev
#                         the reference yamux implementation the tunnel interop tests run against
#   chromium              the dashboard tests (driven by playwright-core; no browser download)
#   libvulkan1, mesa-vulkan-drivers
#                         the Vulkan loader and Mesa's lavapipe, a software Vulkan device: the GPU tests run the
#                         prebuilt Vulkan backend module on it (GGML_VK_VISIBLE_DEVICES=0)
#   binutils, procps      readelf (the relocatable build's $ORIGIN rpath), pgrep
#   strace                the chaos tests' syscall fault injection (a SIGKILL between two renames of a store write)
#   fuse3, libfuse3-dev, pkg-config
#                         the chaos tests' slow disk (test/helpers/slowfs.c): a model read at a paced rate
#   g++-mingw-w64-x86-64-posix, gcc-mingw-w64-x86-64-posix, ninja-build
#                         the Windows x64 cross-build (relay llama build --windows)
#   wine, wine64          runs those Windows binaries in the Windows tests (the closest thing to a Windows PC here)
#   xvfb                  an X display for Wine, whose Vulkan goes through its X11 driver (the Windows Vulkan test)
#   zip, unzip            the Windows release's archive (npm run release) and the tests that unpack it
#   debootstrap           a minimal Debian root, the clean machine the Linux release is tested on
set -euo pipefail
pkgs=(cmake g++ make git ccache python3 python3-numpy util-linux ca-certificates golang-go golang-github-hashicorp-yamux-dev chromium libvulkan1 mesa-vulkan-drivers binutils procps strace fuse3 libfuse3-dev pkg-config g++-mingw-w64-x86-64-posix gcc-mingw-w64-x86-64-posix ninja-build wine wine64 xvfb zip unzip debootstrap)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "system packages: all present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "system packages: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
