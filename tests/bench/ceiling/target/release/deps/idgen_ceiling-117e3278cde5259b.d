/work/main/tests/bench/ceiling/target/release/deps/idgen_ceiling-117e3278cde5259b.d: src/main.rs src/../../../../src/segment/chain.rs src/../../../../src/snowflake/generator.rs src/../../../../src/snowflake/layout.rs

/work/main/tests/bench/ceiling/target/release/deps/idgen_ceiling-117e3278cde5259b: src/main.rs src/../../../../src/segment/chain.rs src/../../../../src/snowflake/generator.rs src/../../../../src/snowflake/layout.rs

src/main.rs:
src/../../../../src/segment/chain.rs:
src/../../../../src/snowflake/generator.rs:
src/../../../../src/snowflake/layout.rs:
