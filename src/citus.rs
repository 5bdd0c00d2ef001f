//! Citus, as both wings see it: whether this database belongs to a Citus
//! cluster, and which node of it this server is — read from Citus's own
//! metadata (`pg_catalog.pg_dist_local_group`, `pg_catalog.pg_dist_node`),
//! never from a setting of ours, so that a node added later needs no step.
//!
//! * segment IDs: on a worker, a tag without a row of its own takes its
//!   ranges from the coordinator's `id_segment` (`segment::citus_source`);
//! * snowflake IDs: `pg_idgen.machine_id = 'citus'` makes the node's
//!   group id its machine id (the coordinator is group 0; a standby shares
//!   its primary's group, whose mark travels in the WAL). Citus never gives
//!   a group id to two nodes (`pg_dist_groupid_seq`), also not to a node
//!   removed and added again.
//!
//! Citus is optional: every look-up first checks that the extension is
//! installed in the database, by its catalog entry, and reads its tables by
//! their schema (`pg_catalog`). Everything here needs a transaction.

use pgrx::prelude::*;

/// This server's place in a Citus cluster, in the current database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// Citus is not installed in this database.
    NotCitus,
    /// Citus is installed but this node is in no cluster yet: its metadata
    /// knows no node (a worker not added with `citus_add_node`, or a
    /// coordinator before `citus_set_coordinator_host` or its first
    /// worker).
    NotJoined,
    /// Group 0.
    Coordinator,
    /// A worker (or a worker's standby): its group id.
    Worker { group: i32 },
}

impl Node {
    /// The node's group id, once it is in a cluster.
    pub fn group(self) -> Option<i32> {
        match self {
            Node::Coordinator => Some(0),
            Node::Worker { group } => Some(group),
            Node::NotCitus | Node::NotJoined => None,
        }
    }
}

/// Which node this server is, read now (a few catalog rows).
pub fn node() -> Result<Node, pgrx::spi::Error> {
    Spi::connect(|client| {
        let rows = client.select(
            "SELECT EXISTS (SELECT FROM pg_catalog.pg_extension \
                             WHERE extname OPERATOR(pg_catalog.=) 'citus')",
            Some(1),
            &[],
        )?;
        if rows.first().get::<bool>(1)? != Some(true) {
            return Ok(Node::NotCitus);
        }
        let rows = client.select(
            "SELECT (SELECT groupid FROM pg_catalog.pg_dist_local_group LIMIT 1), \
                    EXISTS (SELECT FROM pg_catalog.pg_dist_node)",
            Some(1),
            &[],
        )?;
        let row = rows.first();
        Ok(
            match (row.get::<i32>(1)?, row.get::<bool>(2)?.unwrap_or(false)) {
                (_, false) | (None, _) => Node::NotJoined,
                (Some(0), true) => Node::Coordinator,
                (Some(group), true) => Node::Worker { group },
            },
        )
    })
}

/// What another node of the Citus cluster said of its snowflake machine
/// id (`namesakes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Namesake {
    /// `host:port`, as `pg_dist_node` has it.
    pub node: String,
    /// Whether its layout (bits and epoch) is this node's: then their IDs
    /// can be equal, provably.
    pub same_layout: bool,
}

/// The other primary nodes of this Citus cluster whose default snowflake
/// generator has machine id `machine`, asked through Citus's own
/// connections (`run_command_on_all_nodes`) in the same database; a node
/// that does not answer (down, no pg_idgen there) is not counted. `layout`:
/// this node's machine bits, sequence bits and epoch (Unix ms); `schema`:
/// the extension's, quoted.
pub fn namesakes(
    schema: &str,
    machine: i64,
    layout: (u32, u32, i64),
) -> Result<Vec<Namesake>, pgrx::spi::Error> {
    let command = format!(
        "SELECT machine_id::pg_catalog.text OPERATOR(pg_catalog.||) ' ' \
                OPERATOR(pg_catalog.||) machine_bits OPERATOR(pg_catalog.||) ' ' \
                OPERATOR(pg_catalog.||) sequence_bits OPERATOR(pg_catalog.||) ' ' \
                OPERATOR(pg_catalog.||) (EXTRACT(epoch FROM epoch) OPERATOR(pg_catalog.*) 1000)::pg_catalog.int8 \
           FROM {schema}.snowflake_status WHERE generator OPERATOR(pg_catalog.=) 'default'"
    );
    Spi::connect(|client| {
        let rows = client.select(
            "SELECT n.nodename OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) n.nodeport, r.result \
               FROM pg_catalog.run_command_on_all_nodes($1) r \
               JOIN pg_catalog.pg_dist_node n ON n.nodeid OPERATOR(pg_catalog.=) r.nodeid \
              WHERE r.success AND n.groupid OPERATOR(pg_catalog.<>) \
                    (SELECT groupid FROM pg_catalog.pg_dist_local_group LIMIT 1)",
            None,
            &[command.into()],
        )?;
        let mut found = Vec::new();
        for row in rows {
            let (Some(node), Some(answer)) = (row.get::<String>(1)?, row.get::<String>(2)?) else {
                continue;
            };
            let fields: Vec<i64> = answer.split(' ').filter_map(|f| f.parse().ok()).collect();
            if let [their_machine, bits, sequence, epoch] = fields[..] {
                if their_machine == machine {
                    found.push(Namesake {
                        node,
                        same_layout: (bits, sequence, epoch)
                            == (i64::from(layout.0), i64::from(layout.1), layout.2),
                    });
                }
            }
        }
        Ok(found)
    })
}

/// The Citus functions that make a table distributed, a reference table,
/// or a Citus local table.
#[cfg(not(feature = "pg15"))]
const DISTRIBUTING: [&str; 4] = [
    "create_distributed_table",
    "create_distributed_table_concurrently",
    "create_reference_table",
    "citus_add_local_table_to_metadata",
];

/// Installs the guard that refuses to let Citus distribute the
/// extension's own tables (`id_segment` and the others): each node keeps
/// them local — the workers draw from the coordinator's `id_segment`
/// (`segment::citus_source`), and `snowflake_high_water` is each node's
/// own mark. Only where Citus is preloaded (it supports PostgreSQL 16 and
/// later), so other servers pay nothing: a `post_parse_analyze_hook`
/// that looks for a call of one of `DISTRIBUTING` whose first argument is
/// a constant naming a pg_idgen table — a call with a table computed at
/// run time is left to Citus, which refuses a table with triggers anyway.
pub fn install_guard() {
    #[cfg(not(feature = "pg15"))]
    guard::install();
}

#[cfg(not(feature = "pg15"))]
mod guard {
    use super::DISTRIBUTING;
    use crate::errors::IdgenError;
    use pgrx::pg_sys;
    use pgrx::prelude::*;
    use std::ffi::CStr;

    static mut PREVIOUS: pg_sys::post_parse_analyze_hook_type = None;

    pub fn install() {
        // SAFETY: _PG_init, in the postmaster, single-threaded: reads a
        // setting and chains the hook, as pg_stat_statements does.
        unsafe {
            let preload =
                pg_sys::GetConfigOption(c"shared_preload_libraries".as_ptr(), true, false);
            let citus_preloaded = !preload.is_null()
                && CStr::from_ptr(preload)
                    .to_string_lossy()
                    .split(',')
                    .any(|lib| lib.trim().trim_matches('"') == "citus");
            if !citus_preloaded {
                return;
            }
            PREVIOUS = pg_sys::post_parse_analyze_hook;
            pg_sys::post_parse_analyze_hook = Some(after_parse_analysis);
        }
    }

    #[pg_guard]
    unsafe extern "C-unwind" fn after_parse_analysis(
        pstate: *mut pg_sys::ParseState,
        query: *mut pg_sys::Query,
        jstate: *mut pg_sys::JumbleState,
    ) {
        // SAFETY: the hook's own arguments; the walker only reads the
        // tree, and raises (ERROR) from inside pg_guard'ed functions.
        unsafe {
            if let Some(previous) = PREVIOUS {
                previous(pstate, query, jstate);
            }
            if (*query).commandType == pg_sys::CmdType::CMD_SELECT {
                pg_sys::query_tree_walker_impl(query, Some(walk), std::ptr::null_mut(), 0);
            }
        }
    }

    #[pg_guard]
    unsafe extern "C-unwind" fn walk(
        node: *mut pg_sys::Node,
        context: *mut std::ffi::c_void,
    ) -> bool {
        if node.is_null() {
            return false;
        }
        // SAFETY: a node of the tree being walked.
        unsafe {
            match (*node).type_ {
                pg_sys::NodeTag::T_Query => {
                    return pg_sys::query_tree_walker_impl(node.cast(), Some(walk), context, 0)
                }
                pg_sys::NodeTag::T_FuncExpr => refuse_if_distributing(node.cast()),
                _ => {}
            }
            pg_sys::expression_tree_walker_impl(node, Some(walk), context)
        }
    }

    /// Raises 0A000 for a call of one of `DISTRIBUTING` on a table of the
    /// extension.
    ///
    /// # Safety
    /// `call` is a `FuncExpr` of an analysed query.
    unsafe fn refuse_if_distributing(call: *mut pg_sys::FuncExpr) {
        // SAFETY: the caller's promise; list and node accessors of PostgreSQL.
        unsafe {
            let args = (*call).args;
            if args.is_null() || (*args).length == 0 {
                return;
            }
            let first = (*(*args).elements).ptr_value as *mut pg_sys::Node;
            if (*first).type_ != pg_sys::NodeTag::T_Const {
                return;
            }
            let constant = first as *mut pg_sys::Const;
            if (*constant).consttype != pg_sys::REGCLASSOID || (*constant).constisnull {
                return;
            }
            let relid = pg_sys::Oid::from_datum((*constant).constvalue, false).unwrap_or_default();
            let extension = pg_sys::get_extension_oid(c"pg_idgen".as_ptr(), true);
            if extension == pg_sys::InvalidOid
                || pg_sys::getExtensionOfObject(pg_sys::RelationRelationId, relid) != extension
            {
                return;
            }
            let name = pg_sys::get_func_name((*call).funcid);
            if name.is_null()
                || pg_sys::get_func_namespace((*call).funcid)
                    != pg_sys::Oid::from(pg_sys::PG_CATALOG_NAMESPACE)
            {
                return;
            }
            let function = CStr::from_ptr(name).to_string_lossy().into_owned();
            if DISTRIBUTING.contains(&function.as_str()) {
                let table = CStr::from_ptr(pg_sys::get_rel_name(relid))
                    .to_string_lossy()
                    .into_owned();
                IdgenError::CitusExtensionTable { table, function }.raise();
            }
        }
    }
}
