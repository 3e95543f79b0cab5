//! A catalogue of 500 tools from 10 upstreams, shaped as such servers' tools are (a resource's
//! list, get, create, update and delete, and the actions particular to it), and 50 questions
//! a model might search it with, each with the one tool that answers it. The tool search
//! benchmark counts the catalogue's listing and measures `find_tools` on it; a test holds the
//! search's recall on the questions.
//!
//! The questions are written as a person would ask, not from the descriptions: many share no
//! word with the tool that answers them but its subject.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use serde_json::json;

/// What a tool does to a resource.
enum Action {
    List,
    Get,
    Create,
    Update,
    Delete,
    /// A tool of its own: its name, what it does, and whether it only reads.
    Own(&'static str, &'static str, bool),
}

use Action::{Create, Delete, Get, List, Own, Update};

/// One kind of thing an upstream holds, and the tools it has for it.
struct Resource {
    singular: &'static str,
    plural: &'static str,
    about: &'static str,
    /// The fields a create or update sets: (name, what it is).
    fields: &'static [(&'static str, &'static str)],
    actions: &'static [Action],
}

/// An upstream: its alias, the product it speaks for, and its resources.
struct Upstream {
    alias: &'static str,
    product: &'static str,
    resources: &'static [Resource],
}

const fn r(
    singular: &'static str,
    plural: &'static str,
    about: &'static str,
    fields: &'static [(&'static str, &'static str)],
    actions: &'static [Action],
) -> Resource {
    Resource {
        singular,
        plural,
        about,
        fields,
        actions,
    }
}

const CRUD: &[Action] = &[List, Get, Create, Update, Delete];

const UPSTREAMS: &[Upstream] = &[
    Upstream {
        alias: "github",
        product: "GitHub",
        resources: &[
            r(
                "issue",
                "issues",
                "a bug report, feature request or task tracked in a repository",
                &[
                    ("title", "the issue's title"),
                    ("body", "the issue's text, in Markdown"),
                    ("labels", "labels to set"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Update,
                    Own(
                        "close_issue",
                        "Close a GitHub issue as completed or as not planned.",
                        false,
                    ),
                ],
            ),
            r(
                "pull_request",
                "pull_requests",
                "a proposed change from one branch into another",
                &[
                    ("title", "the pull request's title"),
                    ("head", "the branch with the changes"),
                    ("base", "the branch to merge into"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Own(
                        "merge_pull_request",
                        "Merge a GitHub pull request into its base branch, as a merge commit, squashed or rebased.",
                        false,
                    ),
                    Own(
                        "review_pull_request",
                        "Submit a review of a GitHub pull request: approve it, request changes, or comment.",
                        false,
                    ),
                ],
            ),
            r(
                "repository",
                "repositories",
                "a Git repository with its code, settings and collaborators",
                &[
                    ("name", "the repository's name"),
                    ("private", "whether only collaborators see it"),
                    ("description", "a short description"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Update,
                    Own(
                        "fork_repository",
                        "Fork a GitHub repository into your account or an organisation.",
                        false,
                    ),
                ],
            ),
            r(
                "branch",
                "branches",
                "a named line of commits in a repository",
                &[
                    ("name", "the branch's name"),
                    ("from", "the commit or branch it starts at"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own(
                        "protect_branch",
                        "Set protection rules on a GitHub branch: required reviews and required status checks before merging.",
                        false,
                    ),
                ],
            ),
            r(
                "commit",
                "commits",
                "a recorded change to a repository's files",
                &[
                    ("sha", "the commit's SHA"),
                    ("path", "only commits that touch this path"),
                ],
                &[
                    List,
                    Get,
                    Own(
                        "compare_commits",
                        "Compare two GitHub commits or branches: the commits between them and the files changed.",
                        true,
                    ),
                    Own(
                        "revert_commit",
                        "Revert a GitHub commit with a new commit that undoes its changes.",
                        false,
                    ),
                    Own(
                        "get_commit_status",
                        "Get the combined state of the checks and statuses reported on a GitHub commit.",
                        true,
                    ),
                ],
            ),
            r(
                "release",
                "releases",
                "a tagged version with release notes and downloadable assets",
                &[
                    ("tag", "the release's Git tag"),
                    ("notes", "the release notes"),
                ],
                CRUD,
            ),
            r(
                "workflow_run",
                "workflow_runs",
                "a run of a GitHub Actions workflow (CI)",
                &[
                    ("workflow", "the workflow's file name"),
                    ("branch", "the branch it ran on"),
                ],
                &[
                    List,
                    Get,
                    Own(
                        "rerun_workflow_run",
                        "Re-run a failed GitHub Actions workflow run, or only its failed jobs.",
                        false,
                    ),
                    Own(
                        "cancel_workflow_run",
                        "Cancel a GitHub Actions workflow run that is in progress.",
                        false,
                    ),
                    Own(
                        "download_workflow_run_logs",
                        "Download the logs of a GitHub Actions workflow run's jobs.",
                        true,
                    ),
                ],
            ),
            r(
                "gist",
                "gists",
                "a shared snippet of code or text",
                &[
                    ("files", "the gist's files"),
                    ("public", "whether anyone may find it"),
                ],
                CRUD,
            ),
            r(
                "comment",
                "comments",
                "a comment on an issue or a pull request",
                &[("body", "the comment's text")],
                &[
                    List,
                    Create,
                    Update,
                    Delete,
                    Own(
                        "react_to_comment",
                        "Add an emoji reaction (+1, heart, rocket) to a GitHub comment.",
                        false,
                    ),
                ],
            ),
            r(
                "file",
                "files",
                "a file's contents in a repository at a branch or commit",
                &[
                    ("path", "the file's path"),
                    ("content", "the new contents"),
                    ("message", "the commit message"),
                ],
                &[
                    Get,
                    Own(
                        "create_or_update_file",
                        "Create a file in a GitHub repository, or replace its contents, with a commit.",
                        false,
                    ),
                    Delete,
                    Own(
                        "search_code",
                        "Search code across GitHub repositories by text, language and path.",
                        true,
                    ),
                    Own(
                        "get_file_history",
                        "List the GitHub commits that changed a file, newest first.",
                        true,
                    ),
                ],
            ),
        ],
    },
    Upstream {
        alias: "jira",
        product: "Jira",
        resources: &[
            r(
                "ticket",
                "tickets",
                "a Jira issue: a story, bug or task with its status, assignee and priority",
                &[
                    ("summary", "the ticket's summary"),
                    ("description", "its description"),
                    ("priority", "Highest, High, Medium, Low or Lowest"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Update,
                    Own(
                        "assign_ticket",
                        "Assign a Jira ticket to a person, or unassign it.",
                        false,
                    ),
                ],
            ),
            r(
                "project",
                "projects",
                "a Jira project with its tickets, workflows and components",
                &[("key", "the project's key"), ("lead", "the project lead")],
                CRUD,
            ),
            r(
                "sprint",
                "sprints",
                "a time-boxed iteration of a Scrum board",
                &[
                    ("name", "the sprint's name"),
                    ("goal", "the sprint goal"),
                    ("start", "its start date"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Own(
                        "start_sprint",
                        "Start a planned Jira sprint on its board.",
                        false,
                    ),
                    Own(
                        "complete_sprint",
                        "Complete an active Jira sprint, moving unfinished tickets to the backlog or the next sprint.",
                        false,
                    ),
                ],
            ),
            r(
                "board",
                "boards",
                "a Scrum or Kanban board of a project",
                &[
                    ("name", "the board's name"),
                    ("filter", "the filter that selects its tickets"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own(
                        "get_board_backlog",
                        "List the tickets in a Jira board's backlog, in rank order.",
                        true,
                    ),
                ],
            ),
            r(
                "epic",
                "epics",
                "a large body of work broken into tickets",
                &[("name", "the epic's name"), ("summary", "its summary")],
                &[
                    List,
                    Get,
                    Create,
                    Update,
                    Own(
                        "list_epic_tickets",
                        "List the Jira tickets that belong to an epic.",
                        true,
                    ),
                ],
            ),
            r(
                "ticket_comment",
                "ticket_comments",
                "a comment on a Jira ticket",
                &[("body", "the comment's text")],
                CRUD,
            ),
            r(
                "worklog",
                "worklogs",
                "time logged against a Jira ticket",
                &[
                    ("time_spent", "the time spent, such as 3h 20m"),
                    ("started", "when the work started"),
                ],
                CRUD,
            ),
            r(
                "version",
                "versions",
                "a release version of a Jira project (fix version)",
                &[
                    ("name", "the version's name"),
                    ("release_date", "when it ships"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Update,
                    Own(
                        "release_version",
                        "Mark a Jira project version as released.",
                        false,
                    ),
                ],
            ),
            r(
                "transition",
                "transitions",
                "a move of a Jira ticket between statuses of its workflow",
                &[("to", "the status to move to")],
                &[
                    List,
                    Own(
                        "transition_ticket",
                        "Move a Jira ticket to another status, such as In Progress or Done, through its workflow.",
                        false,
                    ),
                    Own(
                        "get_workflow",
                        "Get the statuses and transitions of a Jira project's workflow.",
                        true,
                    ),
                    Own(
                        "search_tickets_jql",
                        "Search Jira tickets with a JQL query.",
                        true,
                    ),
                    Own(
                        "link_tickets",
                        "Link two Jira tickets: blocks, is blocked by, duplicates, relates to.",
                        false,
                    ),
                ],
            ),
            r(
                "component",
                "components",
                "a part of a Jira project that tickets are filed under",
                &[("name", "the component's name"), ("lead", "its lead")],
                CRUD,
            ),
        ],
    },
    Upstream {
        alias: "slack",
        product: "Slack",
        resources: &[
            r(
                "message",
                "messages",
                "a message posted in a Slack channel or conversation",
                &[
                    ("channel", "the channel's ID"),
                    ("text", "the message's text"),
                ],
                &[
                    List,
                    Create,
                    Update,
                    Delete,
                    Own(
                        "schedule_message",
                        "Schedule a Slack message to be posted in a channel at a later time.",
                        false,
                    ),
                ],
            ),
            r(
                "channel",
                "channels",
                "a Slack channel where a team talks",
                &[
                    ("name", "the channel's name"),
                    ("private", "whether it is private"),
                    ("topic", "its topic"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Own(
                        "archive_channel",
                        "Archive a Slack channel, so that nobody can post in it.",
                        false,
                    ),
                    Own(
                        "invite_to_channel",
                        "Invite people to a Slack channel.",
                        false,
                    ),
                ],
            ),
            r(
                "user",
                "users",
                "a person in the Slack workspace and their profile",
                &[("email", "the person's email")],
                &[
                    List,
                    Get,
                    Own(
                        "lookup_user_by_email",
                        "Find a Slack user by their email address.",
                        true,
                    ),
                    Own(
                        "get_user_presence",
                        "Tell whether a Slack user is active or away.",
                        true,
                    ),
                    Own(
                        "set_user_status",
                        "Set your Slack status text and emoji, with an expiry.",
                        false,
                    ),
                ],
            ),
            r(
                "reaction",
                "reactions",
                "an emoji reaction on a Slack message",
                &[("name", "the emoji's name")],
                &[
                    List,
                    Create,
                    Delete,
                    Own(
                        "get_reactions",
                        "Get the emoji reactions on one Slack message and who added them.",
                        true,
                    ),
                    Own(
                        "list_reacted_messages",
                        "List the Slack messages a user reacted to.",
                        true,
                    ),
                ],
            ),
            r(
                "slack_file",
                "slack_files",
                "a file shared in Slack",
                &[
                    ("filename", "the file's name"),
                    ("channels", "where to share it"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own(
                        "share_file_publicly",
                        "Make a public link to a Slack file that people outside the workspace can open.",
                        false,
                    ),
                ],
            ),
            r(
                "reminder",
                "reminders",
                "a Slack reminder for yourself or someone else",
                &[("text", "what to be reminded of"), ("time", "when")],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own("complete_reminder", "Mark a Slack reminder as done.", false),
                ],
            ),
            r(
                "thread",
                "threads",
                "the replies to a Slack message",
                &[
                    ("channel", "the channel's ID"),
                    ("ts", "the parent message's timestamp"),
                ],
                &[
                    Get,
                    Own(
                        "reply_in_thread",
                        "Reply to a Slack message in its thread.",
                        false,
                    ),
                    Own(
                        "search_messages",
                        "Search Slack messages across channels by words, sender and date.",
                        true,
                    ),
                    Own(
                        "get_permalink",
                        "Get a permanent link to a Slack message.",
                        true,
                    ),
                    Own("pin_message", "Pin a Slack message to its channel.", false),
                ],
            ),
            r(
                "user_group",
                "user_groups",
                "a Slack user group that can be mentioned together, such as @oncall",
                &[("handle", "the group's handle"), ("users", "its members")],
                CRUD,
            ),
            r(
                "bookmark",
                "bookmarks",
                "a link bookmarked at the top of a Slack channel",
                &[("title", "the bookmark's title"), ("link", "its URL")],
                CRUD,
            ),
            r(
                "canvas",
                "canvases",
                "a Slack canvas: a document in a channel",
                &[("title", "the canvas's title"), ("content", "its Markdown")],
                CRUD,
            ),
        ],
    },
    Upstream {
        alias: "postgres",
        product: "PostgreSQL",
        resources: &[
            r(
                "query",
                "queries",
                "a SQL statement run against the database",
                &[("sql", "the SQL text"), ("params", "its parameters")],
                &[
                    Own(
                        "run_query",
                        "Run a read-only SQL query on the PostgreSQL database and return its rows.",
                        true,
                    ),
                    Own(
                        "execute_statement",
                        "Execute a SQL statement that changes data (INSERT, UPDATE, DELETE) in PostgreSQL.",
                        false,
                    ),
                    Own(
                        "explain_query",
                        "Show the PostgreSQL query plan of a SQL statement, with costs, optionally with EXPLAIN ANALYZE timings.",
                        true,
                    ),
                    Own(
                        "list_slow_queries",
                        "List the slowest PostgreSQL queries by total and mean time (pg_stat_statements).",
                        true,
                    ),
                    Own(
                        "cancel_query",
                        "Cancel a running PostgreSQL query by its backend process ID.",
                        false,
                    ),
                ],
            ),
            r(
                "table",
                "tables",
                "a table of the database and its columns",
                &[
                    ("name", "the table's name"),
                    ("columns", "its columns and types"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own(
                        "get_table_size",
                        "Get the disk size of a PostgreSQL table, with its indexes and TOAST.",
                        true,
                    ),
                ],
            ),
            r(
                "schema",
                "schemas",
                "a namespace of tables, views and functions",
                &[("name", "the schema's name"), ("owner", "its owner")],
                CRUD,
            ),
            r(
                "index",
                "indexes",
                "an index that speeds up lookups on a table's columns",
                &[
                    ("table", "the table"),
                    ("columns", "the indexed columns"),
                    ("method", "btree, hash, gin, gist or brin"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own(
                        "list_unused_indexes",
                        "List PostgreSQL indexes that are never scanned, with the space they take.",
                        true,
                    ),
                ],
            ),
            r(
                "db_role",
                "db_roles",
                "a database role (user) and its privileges",
                &[
                    ("name", "the role's name"),
                    ("login", "whether it may log in"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own(
                        "grant_privileges",
                        "Grant a PostgreSQL role privileges (SELECT, INSERT, ...) on a table or schema.",
                        false,
                    ),
                ],
            ),
            r(
                "database",
                "databases",
                "a database of the PostgreSQL server",
                &[
                    ("name", "the database's name"),
                    ("encoding", "its encoding"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own(
                        "vacuum_analyze",
                        "Run VACUUM ANALYZE on a PostgreSQL table or database, reclaiming space and refreshing planner statistics.",
                        false,
                    ),
                ],
            ),
            r(
                "extension",
                "extensions",
                "an installed extension such as PostGIS or pg_trgm",
                &[("name", "the extension's name"), ("version", "its version")],
                &[List, Get, Create, Update, Delete],
            ),
            r(
                "view",
                "views",
                "a stored query that can be selected from like a table",
                &[("name", "the view's name"), ("definition", "its SELECT")],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own(
                        "refresh_materialized_view",
                        "Refresh a PostgreSQL materialized view's stored rows.",
                        false,
                    ),
                ],
            ),
            r(
                "connection",
                "connections",
                "a client's session with the server",
                &[("pid", "the backend process ID")],
                &[
                    List,
                    Get,
                    Own(
                        "terminate_connection",
                        "Terminate a PostgreSQL client connection by its backend process ID.",
                        false,
                    ),
                    Own(
                        "list_locks",
                        "List the locks PostgreSQL sessions hold and wait for, showing which queries block which.",
                        true,
                    ),
                    Own(
                        "get_server_settings",
                        "Show PostgreSQL server configuration settings, such as work_mem and max_connections.",
                        true,
                    ),
                ],
            ),
            r(
                "replication_slot",
                "replication_slots",
                "a slot that keeps WAL for a replica or a logical decoding client",
                &[("name", "the slot's name"), ("plugin", "the output plugin")],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own(
                        "get_replication_lag",
                        "Get how far each PostgreSQL replica is behind the primary.",
                        true,
                    ),
                ],
            ),
        ],
    },
    Upstream {
        alias: "k8s",
        product: "Kubernetes",
        resources: &[
            r(
                "pod",
                "pods",
                "a running group of containers on a node",
                &[("namespace", "the pod's namespace"), ("name", "its name")],
                &[
                    List,
                    Get,
                    Delete,
                    Own(
                        "get_pod_logs",
                        "Get a Kubernetes pod container's logs, optionally following them or from the previous restart.",
                        true,
                    ),
                    Own(
                        "exec_in_pod",
                        "Run a command inside a Kubernetes pod's container.",
                        false,
                    ),
                ],
            ),
            r(
                "deployment",
                "deployments",
                "a managed set of replicated pods with rolling updates",
                &[
                    ("namespace", "its namespace"),
                    ("image", "the container image"),
                    ("replicas", "how many pods"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Own(
                        "scale_deployment",
                        "Scale a Kubernetes deployment to a number of replicas.",
                        false,
                    ),
                    Own(
                        "rollback_deployment",
                        "Roll a Kubernetes deployment back to its previous revision.",
                        false,
                    ),
                ],
            ),
            r(
                "service",
                "services",
                "a stable network address in front of pods",
                &[
                    ("namespace", "its namespace"),
                    ("port", "the port"),
                    ("type", "ClusterIP, NodePort or LoadBalancer"),
                ],
                CRUD,
            ),
            r(
                "namespace",
                "namespaces",
                "a scope that separates a cluster's resources",
                &[("name", "the namespace's name")],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own(
                        "get_resource_quota",
                        "Get a Kubernetes namespace's resource quota and how much of it is used.",
                        true,
                    ),
                ],
            ),
            r(
                "config_map",
                "config_maps",
                "configuration data as key-value pairs for pods",
                &[
                    ("namespace", "its namespace"),
                    ("data", "its keys and values"),
                ],
                CRUD,
            ),
            r(
                "secret",
                "secrets",
                "sensitive data such as passwords, tokens and keys",
                &[
                    ("namespace", "its namespace"),
                    ("data", "its keys and base64 values"),
                ],
                CRUD,
            ),
            r(
                "node",
                "nodes",
                "a machine of the cluster that runs pods",
                &[("name", "the node's name")],
                &[
                    List,
                    Get,
                    Own(
                        "cordon_node",
                        "Cordon a Kubernetes node so no new pods are scheduled on it.",
                        false,
                    ),
                    Own(
                        "drain_node",
                        "Drain a Kubernetes node: evict its pods before maintenance.",
                        false,
                    ),
                    Own(
                        "get_node_metrics",
                        "Get a Kubernetes node's CPU and memory use.",
                        true,
                    ),
                ],
            ),
            r(
                "job",
                "jobs",
                "a batch task that runs pods until they complete",
                &[
                    ("namespace", "its namespace"),
                    ("image", "the image to run"),
                    ("schedule", "a cron schedule, for a cron job"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own(
                        "trigger_cronjob",
                        "Run a Kubernetes cron job now, outside its schedule.",
                        false,
                    ),
                ],
            ),
            r(
                "ingress",
                "ingresses",
                "HTTP routing from outside the cluster to services",
                &[
                    ("host", "the host name"),
                    ("paths", "the paths and their services"),
                ],
                CRUD,
            ),
            r(
                "event",
                "events",
                "what happened to a cluster's objects: scheduling, pulls, failures",
                &[
                    ("namespace", "the namespace"),
                    ("object", "the object they concern"),
                ],
                &[
                    List,
                    Own(
                        "apply_manifest",
                        "Apply a Kubernetes YAML manifest to the cluster, creating or updating what it describes.",
                        false,
                    ),
                    Own(
                        "get_cluster_info",
                        "Get the Kubernetes cluster's version and its API endpoints.",
                        true,
                    ),
                    Own(
                        "list_api_resources",
                        "List the kinds of resources the Kubernetes API serves.",
                        true,
                    ),
                    Own(
                        "port_forward",
                        "Forward a local port to a Kubernetes pod's port.",
                        false,
                    ),
                ],
            ),
        ],
    },
    Upstream {
        alias: "stripe",
        product: "Stripe",
        resources: &[
            r(
                "customer",
                "customers",
                "a customer of the business with their payment methods",
                &[("email", "the customer's email"), ("name", "their name")],
                &[
                    List,
                    Get,
                    Create,
                    Update,
                    Own(
                        "search_customers",
                        "Search Stripe customers by email, name or metadata.",
                        true,
                    ),
                ],
            ),
            r(
                "payment_intent",
                "payment_intents",
                "a payment being collected from a customer",
                &[
                    ("amount", "the amount in the smallest currency unit"),
                    ("currency", "the currency"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Own(
                        "capture_payment_intent",
                        "Capture the funds of an authorised Stripe payment intent.",
                        false,
                    ),
                    Own(
                        "cancel_payment_intent",
                        "Cancel a Stripe payment intent before it is captured.",
                        false,
                    ),
                ],
            ),
            r(
                "invoice",
                "invoices",
                "a bill for a customer, with line items",
                &[("customer", "the customer"), ("due_date", "when it is due")],
                &[
                    List,
                    Get,
                    Create,
                    Own(
                        "finalize_invoice",
                        "Finalise a draft Stripe invoice so it can be paid.",
                        false,
                    ),
                    Own(
                        "send_invoice",
                        "Email a Stripe invoice to its customer.",
                        false,
                    ),
                ],
            ),
            r(
                "subscription",
                "subscriptions",
                "a customer's recurring payment for a plan",
                &[
                    ("customer", "the customer"),
                    ("price", "the price they pay"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Update,
                    Own(
                        "cancel_subscription",
                        "Cancel a Stripe subscription at once or at the end of its period.",
                        false,
                    ),
                ],
            ),
            r(
                "refund",
                "refunds",
                "money returned to a customer for a charge",
                &[
                    ("payment_intent", "the payment to refund"),
                    ("amount", "how much"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Update,
                    Own("cancel_refund", "Cancel a pending Stripe refund.", false),
                ],
            ),
            r(
                "product",
                "products",
                "a good or service the business sells",
                &[
                    ("name", "the product's name"),
                    ("description", "what it is"),
                ],
                CRUD,
            ),
            r(
                "price",
                "prices",
                "how much a product costs and how often it is billed",
                &[
                    ("product", "the product"),
                    ("unit_amount", "the amount"),
                    ("interval", "month or year, for recurring prices"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Update,
                    Own(
                        "archive_price",
                        "Archive a Stripe price so that it cannot be used for new purchases.",
                        false,
                    ),
                ],
            ),
            r(
                "payout",
                "payouts",
                "money sent from the Stripe balance to a bank account",
                &[("amount", "how much"), ("destination", "the bank account")],
                &[
                    List,
                    Get,
                    Create,
                    Own(
                        "get_balance",
                        "Get the Stripe account's available and pending balance.",
                        true,
                    ),
                    Own(
                        "list_balance_transactions",
                        "List the Stripe balance's transactions: charges, refunds, fees and payouts.",
                        true,
                    ),
                ],
            ),
            r(
                "coupon",
                "coupons",
                "a discount applied to invoices or subscriptions",
                &[
                    ("percent_off", "the discount in percent"),
                    ("duration", "once, repeating or forever"),
                ],
                CRUD,
            ),
            r(
                "dispute",
                "disputes",
                "a customer's chargeback of a payment with their bank",
                &[("evidence", "the evidence to submit")],
                &[
                    List,
                    Get,
                    Update,
                    Own(
                        "close_dispute",
                        "Close a Stripe dispute, accepting the chargeback.",
                        false,
                    ),
                    Own(
                        "create_checkout_session",
                        "Create a Stripe Checkout session: a hosted payment page for a customer to pay on.",
                        false,
                    ),
                ],
            ),
        ],
    },
    Upstream {
        alias: "drive",
        product: "Google Drive",
        resources: &[
            r(
                "drive_file",
                "drive_files",
                "a file stored in Google Drive",
                &[
                    ("name", "the file's name"),
                    ("parents", "the folders it is in"),
                    ("mime_type", "its type"),
                ],
                &[List, Get, Create, Update, Delete],
            ),
            r(
                "folder",
                "folders",
                "a folder of files in Google Drive",
                &[("name", "the folder's name")],
                &[
                    List,
                    Get,
                    Create,
                    Own(
                        "move_file",
                        "Move a Google Drive file into another folder.",
                        false,
                    ),
                    Own("copy_file", "Make a copy of a Google Drive file.", false),
                ],
            ),
            r(
                "permission",
                "permissions",
                "who may view, comment on or edit a file",
                &[
                    ("email", "the person or group"),
                    ("role", "reader, commenter or writer"),
                ],
                &[
                    List,
                    Get,
                    Update,
                    Delete,
                    Own(
                        "share_file",
                        "Share a Google Drive file or folder with people by email, as viewers, commenters or editors.",
                        false,
                    ),
                ],
            ),
            r(
                "drive_comment",
                "drive_comments",
                "a comment on a Google Drive file",
                &[("content", "the comment's text")],
                CRUD,
            ),
            r(
                "revision",
                "revisions",
                "an earlier version of a file",
                &[("keep_forever", "whether to keep it")],
                &[
                    List,
                    Get,
                    Update,
                    Delete,
                    Own(
                        "restore_revision",
                        "Restore an earlier version of a Google Drive file.",
                        false,
                    ),
                ],
            ),
            r(
                "shared_drive",
                "shared_drives",
                "a drive owned by a team rather than a person",
                &[("name", "the drive's name")],
                CRUD,
            ),
            r(
                "spreadsheet",
                "spreadsheets",
                "a Google Sheets spreadsheet",
                &[
                    ("range", "the cells, such as Sheet1!A1:C10"),
                    ("values", "the values"),
                ],
                &[
                    Get,
                    Create,
                    Own(
                        "read_sheet_range",
                        "Read the values of a range of cells in a Google Sheets spreadsheet.",
                        true,
                    ),
                    Own(
                        "write_sheet_range",
                        "Write values to a range of cells in a Google Sheets spreadsheet.",
                        false,
                    ),
                    Own(
                        "append_sheet_rows",
                        "Append rows to the end of a table in a Google Sheets spreadsheet.",
                        false,
                    ),
                ],
            ),
            r(
                "document",
                "documents",
                "a Google Docs document",
                &[
                    ("title", "the document's title"),
                    ("text", "text to insert"),
                ],
                &[
                    Get,
                    Create,
                    Own(
                        "insert_document_text",
                        "Insert text into a Google Docs document at a position.",
                        false,
                    ),
                    Own(
                        "replace_document_text",
                        "Replace every occurrence of a text in a Google Docs document.",
                        false,
                    ),
                    Own(
                        "export_file",
                        "Export a Google Docs, Sheets or Slides file as PDF, DOCX, XLSX or CSV.",
                        true,
                    ),
                ],
            ),
            r(
                "trash",
                "trash",
                "files moved to the trash, kept for 30 days",
                &[],
                &[
                    Own(
                        "list_trash",
                        "List the Google Drive files in the trash.",
                        true,
                    ),
                    Own(
                        "trash_file",
                        "Move a Google Drive file to the trash.",
                        false,
                    ),
                    Own(
                        "untrash_file",
                        "Restore a Google Drive file from the trash.",
                        false,
                    ),
                    Own(
                        "empty_trash",
                        "Delete every file in the Google Drive trash for good.",
                        false,
                    ),
                    Own(
                        "get_storage_quota",
                        "Get how much of the Google Drive storage quota is used.",
                        true,
                    ),
                ],
            ),
            r(
                "drive_search",
                "drive_searches",
                "a search of Google Drive",
                &[("query", "the search terms")],
                &[
                    Own(
                        "search_files",
                        "Search Google Drive files by name, full text, type and owner.",
                        true,
                    ),
                    Own(
                        "list_recent_files",
                        "List the Google Drive files you opened or changed recently.",
                        true,
                    ),
                    Own(
                        "list_shared_with_me",
                        "List the Google Drive files others have shared with you.",
                        true,
                    ),
                    Own(
                        "get_file_activity",
                        "Show who viewed, edited or shared a Google Drive file, and when.",
                        true,
                    ),
                    Own(
                        "watch_file_changes",
                        "Subscribe to a webhook notified when a Google Drive file changes.",
                        false,
                    ),
                ],
            ),
        ],
    },
    Upstream {
        alias: "sentry",
        product: "Sentry",
        resources: &[
            r(
                "error_issue",
                "error_issues",
                "a group of similar errors or crashes from an application",
                &[
                    ("status", "resolved, ignored or unresolved"),
                    ("assignee", "who handles it"),
                ],
                &[
                    List,
                    Get,
                    Update,
                    Delete,
                    Own(
                        "resolve_error_issue",
                        "Mark a Sentry issue as resolved, optionally in the next release.",
                        false,
                    ),
                ],
            ),
            r(
                "error_event",
                "error_events",
                "one occurrence of an error with its stack trace and context",
                &[("event_id", "the event's ID")],
                &[
                    List,
                    Get,
                    Own(
                        "get_latest_event",
                        "Get the latest event of a Sentry issue, with its stack trace and breadcrumbs.",
                        true,
                    ),
                    Own(
                        "search_events",
                        "Search Sentry error events by message, tag, user or release.",
                        true,
                    ),
                    Own(
                        "get_event_attachments",
                        "List the attachments (minidumps, logs) of a Sentry event.",
                        true,
                    ),
                ],
            ),
            r(
                "sentry_project",
                "sentry_projects",
                "an application or service that reports to Sentry",
                &[
                    ("name", "the project's name"),
                    ("platform", "its platform, such as python or javascript"),
                ],
                CRUD,
            ),
            r(
                "sentry_release",
                "sentry_releases",
                "a version of an application as Sentry tracks it",
                &[
                    ("version", "the version"),
                    ("commits", "the commits it includes"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Own(
                        "create_deploy",
                        "Record a deploy of a Sentry release to an environment.",
                        false,
                    ),
                    Own(
                        "get_release_health",
                        "Get a Sentry release's crash-free sessions and users.",
                        true,
                    ),
                ],
            ),
            r(
                "alert_rule",
                "alert_rules",
                "a rule that notifies people when errors or metrics cross a threshold",
                &[
                    ("conditions", "when it fires"),
                    ("actions", "who it notifies"),
                ],
                CRUD,
            ),
            r(
                "team",
                "teams",
                "a group of people who own projects",
                &[("name", "the team's name")],
                &[
                    List,
                    Get,
                    Create,
                    Delete,
                    Own("add_team_member", "Add a person to a Sentry team.", false),
                ],
            ),
            r(
                "client_key",
                "client_keys",
                "a DSN key a project's SDK reports with",
                &[
                    ("name", "the key's name"),
                    ("rate_limit", "events per minute"),
                ],
                CRUD,
            ),
            r(
                "replay",
                "replays",
                "a recording of a user's session in the browser",
                &[("user", "the user")],
                &[
                    List,
                    Get,
                    Delete,
                    Own(
                        "list_replay_errors",
                        "List the errors that happened during a Sentry session replay.",
                        true,
                    ),
                    Own(
                        "get_replay_clicks",
                        "Get the clicks of a Sentry session replay.",
                        true,
                    ),
                ],
            ),
            r(
                "monitor",
                "monitors",
                "a cron monitor that alerts when a scheduled job does not check in",
                &[
                    ("schedule", "the job's schedule"),
                    ("margin", "the minutes of grace"),
                ],
                &[
                    List,
                    Get,
                    Create,
                    Update,
                    Own(
                        "check_in",
                        "Report a cron job's check-in to a Sentry monitor.",
                        false,
                    ),
                ],
            ),
            r(
                "transaction",
                "transactions",
                "a traced request or operation with its spans and timings",
                &[("name", "the transaction's name")],
                &[
                    List,
                    Get,
                    Own(
                        "get_slowest_transactions",
                        "List the slowest Sentry transactions by p95 duration.",
                        true,
                    ),
                    Own(
                        "get_trace",
                        "Get a Sentry distributed trace with all its spans across services.",
                        true,
                    ),
                    Own(
                        "get_web_vitals",
                        "Get a Sentry project's web vitals: LCP, INP and CLS.",
                        true,
                    ),
                ],
            ),
        ],
    },
    Upstream {
        alias: "notion",
        product: "Notion",
        resources: &[
            r(
                "page",
                "pages",
                "a Notion page with its blocks of content",
                &[
                    ("parent", "the parent page or database"),
                    ("title", "the page's title"),
                ],
                &[
                    Get,
                    Create,
                    Update,
                    Own(
                        "archive_page",
                        "Archive a Notion page (move it to the trash).",
                        false,
                    ),
                    Own(
                        "duplicate_page",
                        "Duplicate a Notion page with its content.",
                        false,
                    ),
                ],
            ),
            r(
                "notion_database",
                "notion_databases",
                "a Notion database: a table of pages with properties",
                &[
                    ("title", "the database's title"),
                    ("properties", "its columns"),
                ],
                &[
                    Get,
                    Create,
                    Update,
                    Own(
                        "query_database",
                        "Query a Notion database's rows with filters and sorts.",
                        true,
                    ),
                    Own(
                        "add_database_row",
                        "Add a row (a page) to a Notion database with its property values.",
                        false,
                    ),
                ],
            ),
            r(
                "block",
                "blocks",
                "a piece of a page: a paragraph, heading, to-do, list item or image",
                &[("type", "the block's type"), ("content", "its rich text")],
                &[
                    Get,
                    Update,
                    Delete,
                    Own(
                        "append_blocks",
                        "Append content blocks to a Notion page.",
                        false,
                    ),
                    Own(
                        "list_block_children",
                        "List the blocks inside a Notion page or block.",
                        true,
                    ),
                ],
            ),
            r(
                "notion_comment",
                "notion_comments",
                "a comment on a Notion page or a discussion",
                &[("rich_text", "the comment's text")],
                &[
                    List,
                    Create,
                    Own(
                        "resolve_discussion",
                        "Resolve a Notion discussion thread.",
                        false,
                    ),
                    Own(
                        "list_discussions",
                        "List the open Notion discussions on a page.",
                        true,
                    ),
                    Own(
                        "mention_user",
                        "Mention a person in a Notion comment to notify them.",
                        false,
                    ),
                ],
            ),
            r(
                "notion_user",
                "notion_users",
                "a member or guest of the Notion workspace",
                &[],
                &[
                    List,
                    Get,
                    Own(
                        "get_bot_user",
                        "Get the Notion integration's own user.",
                        true,
                    ),
                    Own(
                        "invite_guest",
                        "Invite a guest to a Notion page by email.",
                        false,
                    ),
                    Own(
                        "remove_member",
                        "Remove a member from the Notion workspace.",
                        false,
                    ),
                ],
            ),
            r(
                "notion_search",
                "notion_searches",
                "a search of the Notion workspace",
                &[("query", "the words")],
                &[
                    Own(
                        "search_notion",
                        "Search Notion pages and databases by title and content.",
                        true,
                    ),
                    Own(
                        "list_recent_pages",
                        "List the Notion pages edited recently.",
                        true,
                    ),
                    Own("list_favorites", "List your favourite Notion pages.", true),
                    Own(
                        "find_page_by_title",
                        "Find a Notion page by its exact title.",
                        true,
                    ),
                    Own(
                        "list_backlinks",
                        "List the Notion pages that link to a page.",
                        true,
                    ),
                ],
            ),
            r(
                "property",
                "properties",
                "a column of a Notion database",
                &[("name", "the property's name"), ("type", "its type")],
                &[List, Get, Create, Update, Delete],
            ),
            r(
                "template",
                "templates",
                "a Notion template that new pages start from",
                &[("name", "the template's name")],
                CRUD,
            ),
            r(
                "notion_view",
                "notion_views",
                "a view of a database: table, board, calendar or timeline",
                &[("layout", "the view's layout"), ("filter", "its filter")],
                CRUD,
            ),
            r(
                "export",
                "exports",
                "a Notion workspace or page exported as Markdown, HTML or PDF",
                &[("format", "markdown, html or pdf")],
                &[
                    List,
                    Get,
                    Create,
                    Own(
                        "import_markdown",
                        "Import a Markdown file into Notion as a new page.",
                        false,
                    ),
                    Own(
                        "get_page_history",
                        "Get a Notion page's version history.",
                        true,
                    ),
                ],
            ),
        ],
    },
    Upstream {
        alias: "calendar",
        product: "Google Calendar",
        resources: &[
            r(
                "calendar_event",
                "calendar_events",
                "a meeting or appointment on a calendar",
                &[
                    ("summary", "the event's title"),
                    ("start", "when it starts"),
                    ("end", "when it ends"),
                    ("attendees", "who is invited"),
                ],
                &[List, Get, Create, Update, Delete],
            ),
            r(
                "calendar",
                "calendars",
                "a calendar of events, yours or one shared with you",
                &[
                    ("summary", "the calendar's name"),
                    ("time_zone", "its time zone"),
                ],
                CRUD,
            ),
            r(
                "attendee",
                "attendees",
                "a person invited to an event and their response",
                &[("email", "the person's email")],
                &[
                    List,
                    Create,
                    Delete,
                    Own(
                        "respond_to_invitation",
                        "Accept, decline or tentatively accept a Google Calendar invitation.",
                        false,
                    ),
                    Own(
                        "propose_new_time",
                        "Propose a new time for a Google Calendar event you are invited to.",
                        false,
                    ),
                ],
            ),
            r(
                "free_busy",
                "free_busy",
                "when people are free or busy",
                &[
                    ("emails", "whose calendars"),
                    ("from", "from when"),
                    ("to", "until when"),
                ],
                &[
                    Own(
                        "query_free_busy",
                        "Find when people are busy or free between two times, from their Google Calendars.",
                        true,
                    ),
                    Own(
                        "find_meeting_time",
                        "Suggest times when every attendee is free for a meeting of a given length.",
                        true,
                    ),
                    Own(
                        "get_working_hours",
                        "Get a person's working hours and location from Google Calendar.",
                        true,
                    ),
                    Own(
                        "set_out_of_office",
                        "Set an out-of-office event that declines meetings while you are away.",
                        false,
                    ),
                    Own(
                        "set_focus_time",
                        "Block focus time on your Google Calendar that declines new meetings.",
                        false,
                    ),
                ],
            ),
            r(
                "room",
                "rooms",
                "a bookable meeting room or resource",
                &[
                    ("building", "the building"),
                    ("capacity", "how many people"),
                ],
                &[
                    List,
                    Get,
                    Own(
                        "book_room",
                        "Book a meeting room for a Google Calendar event.",
                        false,
                    ),
                    Own(
                        "release_room",
                        "Release a meeting room booked for an event.",
                        false,
                    ),
                    Own(
                        "list_buildings",
                        "List the buildings with bookable rooms.",
                        true,
                    ),
                ],
            ),
            r(
                "event_reminder",
                "event_reminders",
                "a notification before an event starts",
                &[("minutes", "how long before"), ("method", "email or popup")],
                CRUD,
            ),
            r(
                "recurrence",
                "recurrences",
                "the repetition rule of a recurring event (RRULE)",
                &[("rule", "the RRULE")],
                &[
                    Get,
                    Update,
                    Own(
                        "list_instances",
                        "List the occurrences of a recurring Google Calendar event.",
                        true,
                    ),
                    Own(
                        "cancel_occurrence",
                        "Cancel one occurrence of a recurring Google Calendar event.",
                        false,
                    ),
                    Own(
                        "end_recurrence",
                        "End a recurring Google Calendar event series after a date.",
                        false,
                    ),
                ],
            ),
            r(
                "calendar_acl",
                "calendar_acls",
                "who may see or change a calendar",
                &[
                    ("scope", "the person or group"),
                    ("role", "freeBusyReader, reader, writer or owner"),
                ],
                CRUD,
            ),
            r(
                "video_call",
                "video_calls",
                "a Google Meet video conference attached to an event",
                &[],
                &[
                    Own(
                        "add_video_call",
                        "Add a Google Meet video call link to a calendar event.",
                        false,
                    ),
                    Own(
                        "get_meeting_recording",
                        "Get the recording and transcript of a Google Meet call.",
                        true,
                    ),
                    Own(
                        "list_meeting_participants",
                        "List who joined a Google Meet call and for how long.",
                        true,
                    ),
                    Own(
                        "get_time_zone",
                        "Get the time zone of your Google Calendar settings.",
                        true,
                    ),
                    Own(
                        "quick_add_event",
                        "Create a Google Calendar event from a sentence, such as 'Lunch with Ana tomorrow at noon'.",
                        false,
                    ),
                ],
            ),
            r(
                "calendar_color",
                "calendar_colors",
                "the colours events and calendars can have",
                &[("color_id", "the colour's ID")],
                &[
                    List,
                    Own(
                        "set_event_color",
                        "Set the colour of a Google Calendar event.",
                        false,
                    ),
                    Own(
                        "import_ics",
                        "Import events from an iCalendar (.ics) file into Google Calendar.",
                        false,
                    ),
                    Own(
                        "export_ics",
                        "Export a Google Calendar as an iCalendar (.ics) file.",
                        true,
                    ),
                    Own(
                        "subscribe_to_calendar",
                        "Subscribe to a public calendar by its URL, such as a holiday calendar.",
                        false,
                    ),
                ],
            ),
        ],
    },
];

/// The catalogue: each tool as its upstream would list it, with the upstream's alias.
pub(crate) fn tools() -> Vec<(&'static str, Tool)> {
    let mut tools = Vec::new();
    for upstream in UPSTREAMS {
        for resource in upstream.resources {
            for action in resource.actions {
                tools.push((upstream.alias, tool(upstream, resource, action)));
            }
        }
    }
    tools
}

fn tool(upstream: &Upstream, resource: &Resource, action: &Action) -> Tool {
    let (product, one, many, about) = (
        upstream.product,
        resource.singular,
        resource.plural,
        resource.about,
    );
    let (spoken_one, spoken_many) = (one.replace('_', " "), many.replace('_', " "));
    let id = format!("{one}_id");
    let id_field = (id.as_str(), format!("the {spoken_one}'s ID"));
    let (name, description, read_only, fields): (String, String, bool, Vec<(&str, String)>) =
        match action {
            List => (
                format!("list_{many}"),
                format!(
                    "List the {spoken_many} in {product} ({about}), newest first. Filter by \
                     their fields and page through the results with a cursor."
                ),
                true,
                vec![
                    ("query", format!("only {spoken_many} that match this text")),
                    ("cursor", "where the previous page ended".to_owned()),
                    ("limit", "how many to answer, up to 100".to_owned()),
                ],
            ),
            Get => (
                format!("get_{one}"),
                format!("Get one {product} {spoken_one} by its ID, with all its fields: {about}."),
                true,
                vec![id_field],
            ),
            Create => (
                format!("create_{one}"),
                format!("Create a new {product} {spoken_one}: {about}."),
                false,
                resource
                    .fields
                    .iter()
                    .map(|(n, d)| (*n, (*d).to_owned()))
                    .collect(),
            ),
            Update => (
                format!("update_{one}"),
                format!("Change the fields of an existing {product} {spoken_one}."),
                false,
                std::iter::once(id_field)
                    .chain(resource.fields.iter().map(|(n, d)| (*n, (*d).to_owned())))
                    .collect(),
            ),
            Delete => (
                format!("delete_{one}"),
                format!("Delete a {product} {spoken_one} for good; it cannot be restored."),
                false,
                vec![id_field],
            ),
            Own(name, description, read_only) => (
                (*name).to_owned(),
                (*description).to_owned(),
                *read_only,
                std::iter::once(id_field)
                    .chain(resource.fields.iter().map(|(n, d)| (*n, (*d).to_owned())))
                    .collect(),
            ),
        };
    let mut properties = serde_json::Map::new();
    for (field, what) in &fields {
        properties.insert(
            (*field).to_owned(),
            json!({ "type": "string", "description": what }),
        );
    }
    let required: Vec<&str> = fields.iter().take(1).map(|(f, _)| *f).collect();
    let schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
    });
    let serde_json::Value::Object(schema) = schema else {
        unreachable!()
    };
    let schema: Arc<JsonObject> = Arc::new(schema);
    Tool::new(name, description, schema).annotate(
        ToolAnnotations::new()
            .read_only(read_only)
            .destructive(matches!(action, Delete)),
    )
}

/// Questions a model might search the catalogue with, and the tool (larkgate's name) that
/// answers each.
pub(crate) const QUERIES: &[(&str, &str)] = &[
    ("open a bug report in a github repo", "github__create_issue"),
    ("merge a pull request", "github__merge_pull_request"),
    (
        "why did the CI build fail, show the logs",
        "github__download_workflow_run_logs",
    ),
    (
        "find where a function is defined across our repositories",
        "github__search_code",
    ),
    ("approve a PR", "github__review_pull_request"),
    ("move a jira ticket to done", "jira__transition_ticket"),
    (
        "log three hours of work on a ticket",
        "jira__create_worklog",
    ),
    ("give a jira ticket to someone", "jira__assign_ticket"),
    ("close the current sprint", "jira__complete_sprint"),
    ("search tickets with JQL", "jira__search_tickets_jql"),
    ("post a message in a slack channel", "slack__create_message"),
    (
        "find a slack user from their email address",
        "slack__lookup_user_by_email",
    ),
    ("reply in a slack thread", "slack__reply_in_thread"),
    (
        "remind me tomorrow to send the report",
        "slack__create_reminder",
    ),
    (
        "set my slack status to on holiday",
        "slack__set_user_status",
    ),
    (
        "run a select statement on the database",
        "postgres__run_query",
    ),
    (
        "which postgres queries are slowest",
        "postgres__list_slow_queries",
    ),
    (
        "show the query plan of a sql statement",
        "postgres__explain_query",
    ),
    (
        "which sessions are blocking each other on locks",
        "postgres__list_locks",
    ),
    ("how big is this table on disk", "postgres__get_table_size"),
    ("show the logs of a crashing pod", "k8s__get_pod_logs"),
    (
        "scale up a deployment to 5 replicas",
        "k8s__scale_deployment",
    ),
    ("undo a bad rollout", "k8s__rollback_deployment"),
    (
        "evict pods from a node before maintenance",
        "k8s__drain_node",
    ),
    (
        "apply a yaml manifest to the cluster",
        "k8s__apply_manifest",
    ),
    ("refund a customer's payment", "stripe__create_refund"),
    (
        "cancel a customer's subscription",
        "stripe__cancel_subscription",
    ),
    (
        "how much money is in our stripe balance",
        "stripe__get_balance",
    ),
    ("email an invoice to a customer", "stripe__send_invoice"),
    (
        "make a hosted checkout payment page",
        "stripe__create_checkout_session",
    ),
    (
        "share a google drive document with a colleague so they can edit",
        "drive__share_file",
    ),
    ("read cells from a google sheet", "drive__read_sheet_range"),
    ("convert a google doc to pdf", "drive__export_file"),
    (
        "restore a deleted file from the trash",
        "drive__untrash_file",
    ),
    (
        "search my drive for the budget spreadsheet",
        "drive__search_files",
    ),
    (
        "mark a sentry error as resolved",
        "sentry__resolve_error_issue",
    ),
    (
        "stack trace of the latest crash in a sentry issue",
        "sentry__get_latest_event",
    ),
    (
        "crash free users rate of a release",
        "sentry__get_release_health",
    ),
    (
        "record a deploy to production in sentry",
        "sentry__create_deploy",
    ),
    (
        "slowest endpoints by p95 latency",
        "sentry__get_slowest_transactions",
    ),
    ("add a row to a notion database", "notion__add_database_row"),
    (
        "search notion for the onboarding page",
        "notion__search_notion",
    ),
    (
        "add paragraphs to the end of a notion page",
        "notion__append_blocks",
    ),
    (
        "filter and sort rows of a notion table",
        "notion__query_database",
    ),
    ("export a notion page as markdown", "notion__create_export"),
    (
        "schedule a meeting with ana tomorrow at 3pm",
        "calendar__create_calendar_event",
    ),
    (
        "when is everyone free for a one hour meeting",
        "calendar__find_meeting_time",
    ),
    (
        "decline a meeting invitation",
        "calendar__respond_to_invitation",
    ),
    (
        "book a meeting room for the team sync",
        "calendar__book_room",
    ),
    (
        "add a google meet link to an event",
        "calendar__add_video_call",
    ),
];

/// `builder` with the catalogue's tools registered as its upstreams' tools are, under
/// larkgate's names (`github__create_issue`). They are listed and searched, never called: a
/// call of one is refused.
pub(crate) fn register(
    mut builder: larkgate_platform::PlatformBuilder,
) -> larkgate_platform::PlatformBuilder {
    use larkgate_platform::registry::{Origin, Source, ToolSpec};
    for (alias, tool) in tools() {
        let name = larkgate_platform::names::prefixed_name(alias, &tool.name);
        let read_only = tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        let origin = Origin {
            source: Source::Upstream,
            alias: Some(alias.to_owned()),
            original_name: tool.name.to_string(),
        };
        let spec = ToolSpec {
            description: tool.description.as_deref().unwrap_or_default().to_owned(),
            input_schema: (*tool.input_schema).clone(),
            read_only,
            definition: Some(Arc::new(tool)),
            ..ToolSpec::new(name, origin)
        };
        builder = builder
            .tool(spec, Arc::new(Listed))
            .expect("the catalogue's names are distinct");
    }
    builder
}

/// The handler of the catalogue's tools: they are not called.
struct Listed;

#[async_trait::async_trait]
impl larkgate_platform::registry::ToolHandler for Listed {
    async fn call(
        &self,
        _context: &larkgate_platform::CallContext,
        _arguments: larkgate_binding::Map,
    ) -> Result<larkgate_binding::Map, larkgate_platform::Refusal> {
        Err(larkgate_platform::Refusal::new(
            larkgate_platform::Code::UpstreamUnavailable,
            "the catalogue's tools are listed, not called",
        ))
    }
}

/// The names `find_tools` answers `query` with for `identity`, best first, at most `limit`.
pub(crate) fn found(
    platform: &larkgate_platform::Platform,
    identity: &larkgate_platform::SessionIdentity,
    query: &str,
    limit: usize,
) -> Vec<String> {
    let arguments = json!({ "query": query, "limit": limit });
    let answer = platform
        .find_tools(Some(identity), arguments.as_object())
        .expect("the search answers");
    let structured = answer
        .content
        .and_then(|content| content.structured)
        .expect("the answer is structured");
    structured["tools"]
        .as_array()
        .expect("the answer lists tools")
        .iter()
        .map(|tool| {
            tool["name"]
                .as_str()
                .expect("a found tool has a name")
                .to_owned()
        })
        .collect()
}

/// The share of [`QUERIES`] whose tool is among the first `k` found.
pub(crate) fn recall_at(
    platform: &larkgate_platform::Platform,
    identity: &larkgate_platform::SessionIdentity,
    k: usize,
) -> f64 {
    let hits = QUERIES
        .iter()
        .filter(|(query, expected)| {
            found(platform, identity, query, k)
                .iter()
                .any(|name| name == expected)
        })
        .count();
    hits as f64 / QUERIES.len() as f64
}
