/work/main/tests/bench/ceiling/target/release/deps/idgen_ceiling-77df5dffbfa2870e.d: src/main.rs src/../../../../src/segment/chain.rs src/../../../../src/snowflake/generator.rs src/../../../../src/snowflake/layout.rs Cargo.toml

/work/main/tests/bench/ceiling/target/release/deps/libidgen_ceiling-77df5dffbfa2870e.rmeta: src/main.rs src/../../../../src/segment/chain.rs src/../../../../src/snowflake/generator.rs src/../../../../src/snowflake/layout.rs Cargo.toml

src/main.rs:
src/../../../../src/segment/chain.rs:
src/../../../../src/snowflake/generator.rs:
src/../../../../src/snowflake/layout.rs:
Cargo.toml:

# env-dep:CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
# env-dep:CLIPPY_CONF_DIR
