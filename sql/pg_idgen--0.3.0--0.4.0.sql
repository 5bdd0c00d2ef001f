-- pg_idgen 0.3.0 -> 0.4.0: ALTER EXTENSION pg_idgen UPDATE TO '0.4.0'.
-- Every change to the SQL surface after release 0.3.0 goes here, in the
-- order it landed; tests/integration/test_upgrade.py updates a 0.1.0
-- database to 0.2.0, 0.3.0 and then 0.4.0 in place.
\echo Use "ALTER EXTENSION pg_idgen UPDATE TO '0.4.0'" to load this file. \quit

-- Drawing snowflake IDs needs a grant, as nextval() on a sequence does: a
-- role nobody gave it can no longer hold the cluster's generator at its
-- lead (finalize.sql says more). The roles that drew them through PUBLIC
-- need GRANT EXECUTE; the update says so.
REVOKE ALL ON FUNCTION snowflake_nextval() FROM PUBLIC;
REVOKE ALL ON FUNCTION snowflake_js_nextval() FROM PUBLIC;
DO $$
BEGIN
    RAISE WARNING 'pg_idgen 0.4.0: snowflake_nextval() and snowflake_js_nextval() now need EXECUTE, as nextval() needs USAGE on its sequence'
        USING HINT = 'Grant it to the roles that draw snowflake IDs: GRANT EXECUTE ON FUNCTION snowflake_nextval(), snowflake_js_nextval() TO <role>;';
END
$$;
-- Only the event trigger's function (SECURITY DEFINER) calls it.
REVOKE ALL ON FUNCTION segment_defaults_check(oid) FROM PUBLIC;
