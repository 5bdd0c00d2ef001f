-- Who may do what (docs/security.md): a role without grants is refused
-- every generator and every tag change, as a sequence refuses nextval()
-- without USAGE; with the grants the docs give, it draws.
\set SHOW_CONTEXT never
\set VERBOSITY terse
CREATE EXTENSION pg_idgen;
SELECT segment_create('guarded', step => 10);
CREATE ROLE idgen_regress_nobody;
CREATE ROLE idgen_regress_app;
GRANT EXECUTE ON FUNCTION segment_nextval(text), snowflake_nextval() TO idgen_regress_app;

SET ROLE idgen_regress_nobody;
SELECT segment_nextval('guarded');
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_nextval();
\echo :LAST_ERROR_SQLSTATE
SELECT snowflake_js_nextval();
\echo :LAST_ERROR_SQLSTATE
SELECT segment_create('mine');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_setval('guarded', 100);
\echo :LAST_ERROR_SQLSTATE
SELECT segment_drop('guarded');
\echo :LAST_ERROR_SQLSTATE
SELECT segment_defaults_check('pg_class'::regclass);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM segment_status;
\echo :LAST_ERROR_SQLSTATE
-- Taking an ID apart needs nothing.
SELECT machine_id, sequence FROM snowflake_parse(4194304);
RESET ROLE;

SET ROLE idgen_regress_app;
SELECT segment_nextval('guarded');
SELECT snowflake_nextval() > 0 AS drawn;
SELECT snowflake_js_nextval();
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

DROP OWNED BY idgen_regress_nobody, idgen_regress_app;
DROP ROLE idgen_regress_nobody;
DROP ROLE idgen_regress_app;
DROP EXTENSION pg_idgen;
