/work/main/tests/bench/ceiling/target/release/deps/cfg_if-be8c7e3d24778fb8.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs

/work/main/tests/bench/ceiling/target/release/deps/libcfg_if-be8c7e3d24778fb8.rlib: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs

/work/main/tests/bench/ceiling/target/release/deps/libcfg_if-be8c7e3d24778fb8.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/cfg-if-1.0.5/src/lib.rs:
