"""The low layer: what every other part of netra may use, and which knows no GPU class.

The shared types (op families and contracts: ops; templates, tactics, artifact specs, toolchain
identity: types; model manifests: models), the strict schema reader (schema), TOML, hashing, ELF
section reading, safe file reads and writes (files), the driver-library finder (libraries), and
bounded tool runs with their signal handling (proc, interrupts). Modules here import only each other
and netra.errors (docs/architecture.md).
"""
