//! Who may see and call what: every visibility and role decision larkgate makes, in one place.
//!
//! The pipeline's `authorize` step, the tool listings, the approval operations, the script
//! service and the command line all ask these functions; none decides on its own.
//!
//! Threat model: a principal's roles are read from the store at each request (a token names
//! the principal, never its roles), and these functions only read them. Decisions fail closed:
//! a principal without roles sees nothing; a role is matched by its exact name (`Admin` and
//! `admin ` are not `admin`); a platform tool (approvals, scripts, runs) is visible and callable
//! by its fixed roles alone, so a policy that grants `*` does not hand an author's tools to a
//! principal without the author role; every other tool is decided by the operator's policy.
//! A tool a principal may not see is answered exactly like a tool that does not exist, by the
//! caller of [`may_see`].

use std::collections::BTreeSet;

use larkgate_caller::{RunKind, Source};
use larkgate_store::Principal;

use crate::envelope::{Code, Refusal};
use crate::policy::{Policy, ROLE_ADMIN, ROLE_APPROVER, ROLE_AUTHOR, ROLE_PUBLISHER};
use crate::registry::ToolSpec;

/// Administrators: principals, tokens, upstreams, every run record.
pub const ADMINS: &[&str] = &[ROLE_ADMIN];
/// The roles that resolve approvals (never their own calls').
pub const APPROVERS: &[&str] = &[ROLE_APPROVER, ROLE_ADMIN];
/// The roles that save and run drafts.
pub const AUTHORS: &[&str] = &[ROLE_AUTHOR, ROLE_ADMIN];
/// The roles that publish scripts.
pub const PUBLISHERS: &[&str] = &[ROLE_PUBLISHER, ROLE_ADMIN];
/// The roles that read the script catalogue and run records.
pub const READERS: &[&str] = &[ROLE_AUTHOR, ROLE_PUBLISHER, ROLE_ADMIN];

/// Whether `principal` holds any of `roles`, by exact name.
pub fn has_any_role(principal: &Principal, roles: &[&str]) -> bool {
    principal.roles.iter().any(|r| roles.contains(&r.as_str()))
}

/// `Ok` if `principal` holds any of `roles`; else a `forbidden` refusal saying it may not do
/// `what` and naming the first of `roles` as the one it needs.
pub fn require_any_role(principal: &Principal, roles: &[&str], what: &str) -> Result<(), Refusal> {
    if has_any_role(principal, roles) {
        return Ok(());
    }
    let needed = roles.first().copied().unwrap_or(ROLE_ADMIN);
    Err(
        Refusal::new(Code::Forbidden, format!("{} may not {what}", principal.id))
            .with_hint(format!("that needs the {needed} role")),
    )
}

/// Whether `principal` may see `tool` in listings (and be told `forbidden` rather than
/// `not_found` when it may not call it): a platform tool by its fixed roles, any other tool by
/// the policy.
pub fn may_see(policy: &Policy, principal: &Principal, tool: &ToolSpec) -> bool {
    match tool.roles {
        Some(roles) => has_any_role(principal, roles),
        None => policy.may_see(principal, &tool.name),
    }
}

/// Whether `principal` may call `tool`: a platform tool by its fixed roles, any other tool by
/// the policy.
pub fn may_call(policy: &Policy, principal: &Principal, tool: &ToolSpec) -> bool {
    match tool.roles {
        Some(roles) => has_any_role(principal, roles),
        None => policy.may_call(principal, &tool.name),
    }
}

/// Whether `tool` may be reached from a session of `kind` at all: a people-only tool (the
/// approval tools) only from a person's own session, never from a script run of any kind, so
/// that no script — whoever wrote or published it, whatever roles it carries — approves,
/// denies or lists approvals. Unreachable is unseen: such a call is `not_found`, as for a tool
/// that does not exist.
pub fn reachable(kind: RunKind, tool: &ToolSpec) -> bool {
    !tool.people_only || kind == RunKind::Direct
}

/// Whether a run held to `upstream_tools` (a published version's, see
/// [`RunContext::upstream_tools`](crate::RunContext)) may call `tool`: any tool that is not an
/// upstream's, and an upstream tool only when the version was published against it. A script
/// cannot reach, by a name it computes at run time, an upstream tool its publisher never saw
/// it refer to; `None` holds the run to no list.
pub fn within_published_tools(upstream_tools: Option<&BTreeSet<String>>, tool: &ToolSpec) -> bool {
    tool.origin.source != Source::Upstream
        || upstream_tools.is_none_or(|tools| tools.contains(&tool.name))
}

/// Whether `reader` may read a run record: whoever started it, the principal it ran as, and
/// administrators.
pub fn may_read_run(reader: &Principal, ran_as: &str, started_by: Option<&str>) -> bool {
    reader.id == ran_as || started_by == Some(reader.id.as_str()) || has_any_role(reader, ADMINS)
}

#[cfg(test)]
mod tests {
    use larkgate_caller::{Origin, Source};
    use larkgate_store::{IssuerBinding, PrincipalKind};

    use super::*;

    fn principal(id: &str, roles: &[&str]) -> Principal {
        Principal {
            id: id.to_owned(),
            kind: PrincipalKind::User,
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
            issuer: IssuerBinding::Local,
        }
    }

    fn tool(name: &str, roles: Option<&'static [&'static str]>) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            title: None,
            description: String::new(),
            input_schema: serde_json::Map::new(),
            output_schema: None,
            annotations: Default::default(),
            origin: Origin {
                source: if roles.is_some() {
                    Source::Platform
                } else {
                    Source::Capability
                },
                alias: None,
                original_name: name.to_owned(),
            },
            read_only: false,
            input_shape: None,
            signature: None,
            roles,
            requires_approval: false,
            people_only: false,
            definition: None,
        }
    }

    fn policy(toml: &str) -> Policy {
        toml::from_str(toml).unwrap()
    }

    #[test]
    fn a_published_run_reaches_only_the_upstream_tools_it_was_published_against() {
        let upstream = |name: &str, source: Source| ToolSpec {
            origin: Origin {
                source,
                alias: Some("gh".into()),
                original_name: name.trim_start_matches("gh__").to_owned(),
            },
            ..tool(name, None)
        };
        let pinned: BTreeSet<String> = ["gh__search".to_owned()].into();
        let table = [
            // (held to, tool, reachable)
            (
                Some(&pinned),
                upstream("gh__search", Source::Upstream),
                true,
            ),
            (
                Some(&pinned),
                upstream("gh__delete", Source::Upstream),
                false,
            ),
            // A name that merely looks pinned: the set holds full larkgate names.
            (Some(&pinned), upstream("search", Source::Upstream), false),
            (
                Some(&pinned),
                upstream("gh__search ", Source::Upstream),
                false,
            ),
            // Capabilities, platform tools and other scripts are not upstream tools.
            (Some(&pinned), tool("kv_set", None), true),
            (
                Some(&pinned),
                upstream("script__other", Source::Script),
                true,
            ),
            // No list: direct sessions, drafts, versions from before pins were recorded.
            (None, upstream("gh__delete", Source::Upstream), true),
        ];
        for (held, spec, expected) in table {
            assert_eq!(
                within_published_tools(held, &spec),
                expected,
                "{} held to {held:?}",
                spec.name
            );
        }
        let nothing = BTreeSet::new();
        assert!(!within_published_tools(
            Some(&nothing),
            &upstream("gh__search", Source::Upstream)
        ));
    }

    #[test]
    fn roles_match_by_exact_name_only() {
        let cases: &[(&[&str], bool)] = &[
            (&["admin"], true),
            (&["viewer", "admin"], true),
            (&[], false),
            (&["Admin"], false),
            (&["admin "], false),
            (&[" admin"], false),
            (&["ad"], false),
            (&["admin\u{0}"], false),
            (&["*"], false),
            (&[""], false),
        ];
        for (roles, expected) in cases {
            assert_eq!(
                has_any_role(&principal("p", roles), ADMINS),
                *expected,
                "roles {roles:?}"
            );
        }
    }

    #[test]
    fn platform_tools_follow_their_fixed_roles_whatever_the_policy_grants() {
        // A policy that grants every tool to `viewer` does not reach the approval tools.
        let generous = policy("[roles.viewer]\ncall = [\"*\"]\n[roles.approver]\n");
        let approvals = tool("approvals_approve", Some(APPROVERS));
        let viewer = principal("v", &["viewer"]);
        assert!(!may_see(&generous, &viewer, &approvals));
        assert!(!may_call(&generous, &viewer, &approvals));
        // An approver needs no policy line for them.
        let approver = principal("a", &["approver"]);
        assert!(may_see(&generous, &approver, &approvals));
        assert!(may_call(&generous, &approver, &approvals));
        // A policy that names no one still lets an admin resolve approvals.
        let admin = principal("root", &["admin"]);
        assert!(may_call(&policy(""), &admin, &approvals));
    }

    #[test]
    fn other_tools_follow_the_policy_and_fail_closed() {
        let p = policy(
            "[roles.viewer]\nlist = [\"*\"]\ncall = [\"kv_get\"]\n[roles.writer]\ncall = [\"kv_*\"]\n",
        );
        let kv_set = tool("kv_set", None);
        let kv_get = tool("kv_get", None);
        let cases: &[(&[&str], &ToolSpec, bool, bool)] = &[
            // (roles, tool, may see, may call)
            (&["viewer"], &kv_get, true, true),
            (&["viewer"], &kv_set, true, false),
            (&["writer"], &kv_set, true, true),
            (&[], &kv_get, false, false),
            (&["unknown"], &kv_get, false, false),
            (&["Viewer"], &kv_get, false, false),
            // The default policy's admin is not in this policy.
            (&["admin"], &kv_get, false, false),
        ];
        for (roles, tool, see, call) in cases {
            let who = principal("p", roles);
            assert_eq!(
                may_see(&p, &who, tool),
                *see,
                "{roles:?} sees {}",
                tool.name
            );
            assert_eq!(
                may_call(&p, &who, tool),
                *call,
                "{roles:?} calls {}",
                tool.name
            );
        }
    }

    #[test]
    fn a_run_record_is_read_by_its_starter_its_principal_and_admins_only() {
        // (reader, its roles, ran as, started by, may read)
        type Case<'a> = (&'a str, &'a [&'a str], &'a str, Option<&'a str>, bool);
        let cases: &[Case<'_>] = &[
            ("ada", &["author"], "ada", None, true),
            ("ada", &["author"], "script:greet", Some("ada"), true),
            ("bo", &["author"], "script:greet", Some("ada"), false),
            ("bo", &["publisher", "approver"], "ada", Some("ada"), false),
            ("root", &["admin"], "ada", Some("ada"), true),
            // An id that only looks like the starter's is not it.
            ("ada ", &["author"], "ada", Some("ada"), false),
        ];
        for (reader, roles, ran_as, started_by, expected) in cases {
            assert_eq!(
                may_read_run(&principal(reader, roles), ran_as, *started_by),
                *expected,
                "{reader:?} reading a run of {ran_as:?} started by {started_by:?}"
            );
        }
    }
}
