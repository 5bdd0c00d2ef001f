/work/main/tests/bench/ceiling/target/release/deps/scopeguard-2c7a7e1d83967548.d: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs

/work/main/tests/bench/ceiling/target/release/deps/libscopeguard-2c7a7e1d83967548.rmeta: /root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs

/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/scopeguard-1.2.0/src/lib.rs:
