//! The segment tags a column's default (or generated) expression, or a
//! domain's default, draws from: the constant arguments of its calls of
//! the extension's `segment_nextval(text)`, read from the expression tree
//! PostgreSQL stores (`pg_attrdef.adbin`, `pg_type.typdefaultbin`), so that
//! `segment_drop` can refuse to drop a tag a column still uses, as `DROP
//! SEQUENCE` refuses, and a default naming a tag that does not exist can
//! be warned about.
//!
//! The stored tree is exact: the call is a `FuncExpr` of the function's
//! oid however its name was spelled (schema-qualified or not), and its
//! argument is there as parse analysis left it — a `Const`, under
//! `tag =>` (`NamedArgExpr`), a `COLLATE` (`CollateExpr`) and the casts
//! that bring it to `text` (`RelabelType`, `CoerceViaIO`, or a cast
//! function such as `bpchar` → `text`, which trims). Such an argument is
//! folded by PostgreSQL's own `eval_const_expressions` into the text the
//! call receives. Any other argument (`current_setting('app.tag')`, `'a'
//! || 'b'`, or a cast whose result depends on settings and is not folded)
//! is not a dependency anyone can know of, and is skipped.

use pgrx::pg_sys::{self, NodeTag};
use pgrx::prelude::*;
use pgrx::PgList;
use std::ffi::{c_void, CString};

/// Every constant tag the stored expression `tree` (a `pg_node_tree` as
/// text) passes to the function `function`, in the order of the tree.
pub fn constant_tags(tree: &str, function: pg_sys::Oid) -> Vec<String> {
    let Ok(tree) = CString::new(tree) else {
        return Vec::new();
    };
    let mut found = Found {
        function,
        tags: Vec::new(),
    };
    // SAFETY: `tree` is a pg_node_tree's text as this server wrote it;
    // stringToNode builds it in the current memory context, and the walk
    // only reads it (`eval_const_expressions` builds new nodes). `found`
    // outlives the walk.
    unsafe {
        let node = pg_sys::stringToNode(tree.as_ptr()) as *mut pg_sys::Node;
        visit(node, (&raw mut found).cast());
    }
    found.tags
}

/// The walk's state: the function looked for and the tags found.
struct Found {
    function: pg_sys::Oid,
    tags: Vec<String>,
}

/// Takes the tag of `node` if it is a call of the function, then walks
/// its children with PostgreSQL's `expression_tree_walker`.
///
/// # Safety
/// `node` is null or a node of the tree being walked; `found` points at
/// the walk's `Found`.
unsafe fn visit(node: *mut pg_sys::Node, found: *mut c_void) -> bool {
    if node.is_null() {
        return false;
    }
    // SAFETY: the caller's promise. An ERROR inside (a cast that fails on
    // its constant) unwinds as a Rust panic through `walk`'s guard.
    unsafe {
        if (*node).type_ == NodeTag::T_FuncExpr {
            let call = node as *mut pg_sys::FuncExpr;
            let found = &mut *(found as *mut Found);
            if (*call).funcid == found.function {
                found.tags.extend(constant_argument(call));
            }
        }
        pg_sys::expression_tree_walker(node, Some(walk), found)
    }
}

/// `visit`, as `expression_tree_walker` calls it for each child.
#[pg_guard]
unsafe extern "C-unwind" fn walk(node: *mut pg_sys::Node, found: *mut c_void) -> bool {
    // SAFETY: the walker passes `visit`'s own node's children and context.
    unsafe { visit(node, found) }
}

/// The text the one argument of `call` always is, if it is a constant.
///
/// # Safety
/// `call` is a `FuncExpr` of a stored expression tree.
unsafe fn constant_argument(call: *mut pg_sys::FuncExpr) -> Option<String> {
    // SAFETY: the caller's promise; node accessors of PostgreSQL.
    unsafe {
        let args = PgList::<pg_sys::Node>::from_pg((*call).args);
        let mut argument = args.get_ptr(0).filter(|_| args.len() == 1)?;
        if (*argument).type_ == NodeTag::T_NamedArgExpr {
            argument = (*(argument as *mut pg_sys::NamedArgExpr)).arg.cast();
        }
        if !casts_of_a_constant(argument) {
            return None;
        }
        let folded = pg_sys::eval_const_expressions(std::ptr::null_mut(), argument);
        if folded.is_null() || (*folded).type_ != NodeTag::T_Const {
            return None;
        }
        let constant = folded as *mut pg_sys::Const;
        if (*constant).constisnull || (*constant).consttype != pg_sys::TEXTOID {
            return None;
        }
        String::from_datum((*constant).constvalue, false)
    }
}

/// Whether `node` is a `Const` under nothing but a `COLLATE` and casts,
/// which `eval_const_expressions` may fold (it folds no call of a function
/// that is not immutable).
///
/// # Safety
/// `node` is null or a node of a stored expression tree.
unsafe fn casts_of_a_constant(mut node: *mut pg_sys::Node) -> bool {
    use pg_sys::CoercionForm::{COERCE_EXPLICIT_CAST, COERCE_IMPLICIT_CAST};
    // SAFETY: the caller's promise; node accessors of PostgreSQL.
    unsafe {
        while !node.is_null() {
            node = match (*node).type_ {
                NodeTag::T_Const => return true,
                NodeTag::T_RelabelType => (*(node as *mut pg_sys::RelabelType)).arg.cast(),
                NodeTag::T_CoerceViaIO => (*(node as *mut pg_sys::CoerceViaIO)).arg.cast(),
                NodeTag::T_CollateExpr => (*(node as *mut pg_sys::CollateExpr)).arg.cast(),
                NodeTag::T_FuncExpr => {
                    let cast = node as *mut pg_sys::FuncExpr;
                    if !matches!(
                        (*cast).funcformat,
                        COERCE_EXPLICIT_CAST | COERCE_IMPLICIT_CAST
                    ) {
                        return false;
                    }
                    // A length coercion (`varchar(3)`) has the length and
                    // whether the cast is explicit as constants after it.
                    let args = PgList::<pg_sys::Node>::from_pg((*cast).args);
                    let rest_constant = (1..args.len()).all(|i| {
                        args.get_ptr(i)
                            .is_some_and(|a| !a.is_null() && (*a).type_ == NodeTag::T_Const)
                    });
                    if !rest_constant {
                        return false;
                    }
                    args.get_ptr(0).unwrap_or(std::ptr::null_mut())
                }
                _ => return false,
            };
        }
        false
    }
}
