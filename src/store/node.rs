//! The Node.js Simplex Hub's data directory as this hub's store records
//! (pure: bytes in, records or a refusal out; no I/O, clock or locks).
//!
//! What the Node hub keeps, relative to its data directory:
//!
//! ```text
//! hub.json                        {version: 1, saved_at, sessions: [...]}: ordinary sessions
//! sessions/<id>/plan.json         {markdown, revision, updated_at}
//! subagents/<id>/metadata.json    one headless child: its session fields plus
//!                                 kind "headless", cascading_parent, subagent, ...
//! subagents/<id>/operations.json  {receipts, requests}: the child's request outcomes
//! subagents/<id>/plan.json        as for a session
//! ```
//!
//! Everything else in those directories (worker configuration, state,
//! memory, logs, `events.jsonl`) is already where this hub looks for it.
//! Unknown fields are ignored. A file that is not JSON, not the Node hub's
//! (a foreign file), of a version this hub does not know, or that lacks a
//! field the import cannot do without is refused as a whole: [`Refusal`]
//! names the file (relative to the data directory) and the field.
//! `docs/store.md` lists the required fields and the defaults of the
//! optional ones.

use std::collections::{HashMap, HashSet};
use std::fmt;

use serde_json::{json, Map, Value};

use super::{ProcessRecord, SessionRecord, SubagentRecord};
use crate::session::headless::{
    is_child_id, Lifecycle, Outcome, OutcomeState, Policy, KIND, MAX_CLEANUP_ATTEMPTS, MAX_OUTCOMES,
};
use crate::wire::ids::is_valid_id;
use crate::wire::worker::plan::PlanRecord;

/// The Node hub's registry file, in the data directory.
pub const HUB_JSON: &str = "hub.json";
/// A headless child's ownership record, in `subagents/<id>/`.
pub const METADATA: &str = "metadata.json";
/// A headless child's request outcomes (and its receipts), in `subagents/<id>/`.
pub const OPERATIONS: &str = "operations.json";
/// A session's plan, in its directory.
pub const PLAN: &str = "plan.json";

/// The `hub.json` format version this hub imports.
pub const STATE_VERSION: u64 = 1;

/// The largest plan text the Node hub accepts (UTF-8 bytes).
pub const MAX_PLAN_BYTES: usize = 64 * 1024;

/// The deepest parent chain this hub restores (its stored `depth` bound).
pub const MAX_DEPTH: u32 = 64;

/// Why a Node file cannot be imported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The file, relative to the data directory (`hub.json`,
    /// `subagents/<id>/metadata.json`).
    pub file: String,
    /// The field (`sessions[1].token`); empty when the file as a whole is
    /// refused.
    pub field: String,
    pub problem: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}: {}", self.file, self.problem)
        } else {
            write!(f, "{}: {}: {}", self.file, self.field, self.problem)
        }
    }
}

/// Values an import needs from outside: the time to stand in for a
/// missing timestamp and fresh lifecycle ids for records without one.
pub struct Context<'a> {
    pub now: &'a str,
    pub fresh_id: &'a mut dyn FnMut() -> String,
}

/// One `hub.json` session.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSession {
    pub session: SessionRecord,
    pub process: Option<ProcessRecord>,
    /// The process record's `docker_management`, as stored.
    pub docker: Option<Value>,
    /// What the import cannot carry over (logged as warnings).
    pub notes: Vec<String>,
    /// Its index in `sessions`, for messages.
    pub index: usize,
}

/// One `subagents/<id>/metadata.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeChild {
    pub session: SessionRecord,
    pub process: Option<ProcessRecord>,
    /// The process record's `docker_management`, as stored.
    pub docker: Option<Value>,
    pub parent_session: String,
    pub parent_lifecycle: String,
    pub parent_worker: String,
    pub lifecycle: Lifecycle,
    pub policy: Policy,
    pub reason: Option<String>,
    pub cleanup_attempts: u32,
    pub retry_at_ms: Option<u64>,
    pub uncertain_start: bool,
    pub termination_confirmed: bool,
    /// The stored outcome tail (from [`parse_operations`]; empty until
    /// the caller sets it).
    pub outcomes: Value,
    pub notes: Vec<String>,
}

/// Everything one import writes, in the store's own records.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Batch {
    /// Ordinary sessions with their process record.
    pub sessions: Vec<(SessionRecord, Option<ProcessRecord>)>,
    /// Headless children: session row, process record, subagent row.
    pub children: Vec<(SessionRecord, Option<ProcessRecord>, SubagentRecord)>,
    /// Plans by session id (only those with a revision).
    pub plans: Vec<(String, PlanRecord)>,
    /// The Node hub's Docker management contexts (`docker_management` of
    /// a process record), by session id, as stored: the supervisor turns
    /// them into its own before the batch is written.
    pub docker: Vec<(String, Value)>,
    /// What could not be carried over, one line each.
    pub notes: Vec<String>,
}

impl Batch {
    /// The process record of session `id` in the batch.
    pub fn process(&self, id: &str) -> Option<&ProcessRecord> {
        let sessions = self.sessions.iter().map(|(s, p)| (s, p));
        let children = self.children.iter().map(|(s, p, _)| (s, p));
        sessions
            .chain(children)
            .find(|(s, _)| s.id == id)
            .and_then(|(_, p)| p.as_ref())
    }

    /// Process records in the batch.
    pub fn processes(&self) -> usize {
        let sessions = self.sessions.iter().filter(|(_, p)| p.is_some()).count();
        let children = self.children.iter().filter(|(_, p, _)| p.is_some()).count();
        sessions + children
    }
}

/// A JSON object being read, with the path of its fields for messages.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
    file: &'a str,
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Longest piece of a file's own text a message quotes, in characters.
const QUOTED_CHARS: usize = 64;

/// `s` quoted for a message, cut at [`QUOTED_CHARS`] (marked `…`).
fn quoted(s: &str) -> String {
    match s.char_indices().nth(QUOTED_CHARS) {
        None => format!("{s:?}"),
        Some((at, _)) => format!("{:?}…", &s[..at]),
    }
}

/// A value for a message: numbers and (quoted, cut) strings as they are,
/// anything else by its kind.
fn shown(v: &Value) -> String {
    match v {
        Value::Number(n) => n.to_string(),
        Value::String(s) => quoted(s),
        other => kind_of(other).to_owned(),
    }
}

impl<'a> Obj<'a> {
    fn new(v: &'a Value, path: String, file: &'a str) -> Result<Obj<'a>, Refusal> {
        match v {
            Value::Object(map) => Ok(Obj { map, path, file }),
            other => Err(Refusal {
                file: file.to_owned(),
                field: path,
                problem: format!("must be an object, not {}", kind_of(other)),
            }),
        }
    }

    fn field(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    fn refuse(&self, key: &str, problem: impl Into<String>) -> Refusal {
        Refusal {
            file: self.file.to_owned(),
            field: self.field(key),
            problem: problem.into(),
        }
    }

    /// The value of `key`; `None` when absent or `null`.
    fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn opt_str(&self, key: &str) -> Result<Option<&'a str>, Refusal> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => {
                Err(self.refuse(key, format!("must be a string, not {}", kind_of(other))))
            }
        }
    }

    /// A string that must be present and not empty.
    fn req_str(&self, key: &str) -> Result<&'a str, Refusal> {
        match self.opt_str(key)? {
            None => Err(self.refuse(key, "is missing")),
            Some("") => Err(self.refuse(key, "must not be empty")),
            Some(s) => Ok(s),
        }
    }

    /// An optional string where empty counts as absent.
    fn opt_text(&self, key: &str) -> Result<Option<&'a str>, Refusal> {
        Ok(self.opt_str(key)?.filter(|s| !s.is_empty()))
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, Refusal> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.refuse(
                key,
                format!("must be true or false, not {}", kind_of(other)),
            )),
        }
    }

    fn opt_u64(&self, key: &str) -> Result<Option<u64>, Refusal> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                self.refuse(
                    key,
                    format!("must be a non-negative integer, not {}", shown(v)),
                )
            }),
        }
    }

    fn opt_obj(&self, key: &str) -> Result<Option<Obj<'a>>, Refusal> {
        self.get(key)
            .map(|v| Obj::new(v, self.field(key), self.file))
            .transpose()
    }

    fn req_obj(&self, key: &str) -> Result<Obj<'a>, Refusal> {
        self.opt_obj(key)?
            .ok_or_else(|| self.refuse(key, "is missing"))
    }
}

/// Parses a file's bytes as JSON, refusing it whole when it is not.
fn parse_json(bytes: &[u8], file: &str) -> Result<Value, Refusal> {
    serde_json::from_slice(bytes).map_err(|e| Refusal {
        file: file.to_owned(),
        field: String::new(),
        problem: format!("is not valid JSON ({e})"),
    })
}

fn whole(file: &str, problem: impl Into<String>) -> Refusal {
    Refusal {
        file: file.to_owned(),
        field: String::new(),
        problem: problem.into(),
    }
}

/// The session fields `hub.json` entries and `metadata.json` share: id,
/// token, spec, creation time, lifecycle id and process.
fn parse_session(
    o: &Obj<'_>,
    kind: &str,
    ctx: &mut Context<'_>,
    notes: &mut Vec<String>,
) -> Result<(SessionRecord, Option<ProcessRecord>, Option<Value>), Refusal> {
    let id = o.req_str("id")?;
    if !is_valid_id(id) {
        return Err(o.refuse(
            "id",
            format!(
                "{} is not a session id (1-128 characters of A-Z a-z 0-9 _ -)",
                quoted(id)
            ),
        ));
    }
    let token = o.req_str("token")?;
    let spec = match o.get("spec") {
        None => json!({}),
        Some(v @ Value::Object(_)) => v.clone(),
        Some(other) => {
            return Err(o.refuse("spec", format!("must be an object, not {}", kind_of(other))))
        }
    };
    let created_at = o.opt_text("created_at")?.unwrap_or(ctx.now).to_owned();
    let lifecycle_id = match o.opt_text("lifecycle_id")? {
        Some(l) => l.to_owned(),
        None => (ctx.fresh_id)(),
    };
    let process = o
        .opt_obj("process")?
        .map(|p| parse_process(&p, id, &lifecycle_id, ctx.now, notes))
        .transpose()?;
    let (process, docker) = match process {
        Some((process, docker)) => (Some(process), docker),
        None => (None, None),
    };
    let session = SessionRecord {
        id: id.to_owned(),
        created_at,
        spec,
        token: token.to_owned(),
        lifecycle_id,
        kind: kind.to_owned(),
    };
    Ok((session, process, docker))
}

/// A Node process record. Its `pid_start_time` is `/proc/<pid>/stat`
/// field 22 as decimal text, the same clock-tick value this hub records,
/// so adoption compares like with like.
fn parse_process(
    p: &Obj<'_>,
    session_id: &str,
    lifecycle_id: &str,
    now: &str,
    notes: &mut Vec<String>,
) -> Result<(ProcessRecord, Option<Value>), Refusal> {
    let pid = match p.get("pid") {
        None => return Err(p.refuse("pid", "is missing")),
        Some(v) => v
            .as_u64()
            .filter(|&n| n >= 1)
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                p.refuse(
                    "pid",
                    format!("must be a positive process id, not {}", shown(v)),
                )
            })?,
    };
    let start_time = match p.get("pid_start_time") {
        None => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(
            s.parse::<u64>()
                .ok()
                .filter(|_| s.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| {
                    p.refuse(
                        "pid_start_time",
                        format!("must be decimal clock ticks from /proc, not {}", quoted(s)),
                    )
                })?,
        ),
        Some(v) => Some(v.as_u64().ok_or_else(|| {
            p.refuse(
                "pid_start_time",
                format!("must be decimal clock ticks from /proc, not {}", shown(v)),
            )
        })?),
    };
    let args = match p.get("args") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| p.refuse(&format!("args[{i}]"), "must be a string"))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => {
            return Err(p.refuse("args", format!("must be an array, not {}", kind_of(other))))
        }
    };
    let state = match p.opt_str("state")? {
        None => "running",
        // The Node hub's names; `stopped` is this hub's `exited`.
        Some(s @ ("starting" | "running" | "stopping" | "exited" | "failed")) => s,
        Some("stopped") => "exited",
        Some(other) => {
            return Err(p.refuse("state", format!("{} is not a process state", quoted(other))))
        }
    };
    if let Some(file) = p.opt_text("pid_file")? {
        notes.push(format!(
            "session {session_id}: the launcher's pid file {file} is not followed (the Node \
             hub did not record the daemon's start time); only the recorded pid {pid} can be \
             adopted"
        ));
    }
    // Its validity is the supervisor's to judge (an unusable one leaves
    // the container unmanaged, with a note, as on the Node hub).
    let docker = p.get("docker_management").filter(|v| !v.is_null()).cloned();
    let record = ProcessRecord {
        session_id: session_id.to_owned(),
        pid,
        start_time,
        started_at: p.opt_text("started_at")?.unwrap_or(now).to_owned(),
        command: p.opt_str("command")?.unwrap_or_default().to_owned(),
        args,
        cwd: p.opt_str("cwd")?.unwrap_or_default().to_owned(),
        log_path: p.opt_text("log_path")?.map(str::to_owned),
        state: state.to_owned(),
        lifecycle_id: lifecycle_id.to_owned(),
    };
    Ok((record, docker))
}

/// `hub.json`: the ordinary sessions. Refuses a file that is not JSON, not
/// a Node hub state file (`version` and `sessions`), of another version,
/// with duplicate ids, or with an entry lacking `id` or `token`.
pub fn parse_hub_json(bytes: &[u8], ctx: &mut Context<'_>) -> Result<Vec<NodeSession>, Refusal> {
    let file = HUB_JSON;
    let doc = parse_json(bytes, file)?;
    let foreign = |why: &str| {
        whole(
            file,
            format!("is not a Node Simplex Hub state file ({why})"),
        )
    };
    let top = doc.as_object().ok_or_else(|| {
        foreign(&format!(
            "the top level is {}, not an object",
            kind_of(&doc)
        ))
    })?;
    let entries = match top.get("sessions") {
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(foreign(&format!(
                "`sessions` is {}, not a list",
                kind_of(other)
            )))
        }
        None => return Err(foreign("it has no `sessions` list")),
    };
    match top.get("version") {
        Some(v) if v.as_u64() == Some(STATE_VERSION) => {}
        Some(v) if v.is_number() => {
            return Err(Refusal {
                file: file.to_owned(),
                field: "version".to_owned(),
                problem: format!(
                    "{} is not supported (this hub imports version {STATE_VERSION})",
                    shown(v)
                ),
            })
        }
        Some(v) => return Err(foreign(&format!("`version` is {}", kind_of(v)))),
        None => return Err(foreign("it has no `version`")),
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let o = Obj::new(entry, format!("sessions[{index}]"), file)?;
        let mut notes = Vec::new();
        let (session, process, docker) = parse_session(&o, "ordinary", ctx, &mut notes)?;
        if let Some(first) = seen.insert(session.id.clone(), index) {
            return Err(o.refuse(
                "id",
                format!("{:?} is also the id of sessions[{first}]", session.id),
            ));
        }
        out.push(NodeSession {
            session,
            process,
            docker,
            notes,
            index,
        });
    }
    Ok(out)
}

/// `subagents/<dir>/metadata.json`: one headless child. `dir` is the
/// directory's name, which must be the record's id.
pub fn parse_metadata(
    dir: &str,
    bytes: &[u8],
    ctx: &mut Context<'_>,
) -> Result<NodeChild, Refusal> {
    let file = format!("subagents/{dir}/{METADATA}");
    let file = file.as_str();
    let doc = parse_json(bytes, file)?;
    let o = Obj::new(&doc, String::new(), file).map_err(|_| {
        whole(
            file,
            "is not a Node headless subagent record (not an object)",
        )
    })?;
    match o.get("kind") {
        Some(Value::String(k)) if k == KIND => {}
        Some(other) => {
            return Err(whole(
                file,
                format!(
                    "is not a Node headless subagent record (kind is {})",
                    shown(other)
                ),
            ))
        }
        None => {
            return Err(whole(
                file,
                "is not a Node headless subagent record (no kind)",
            ))
        }
    }
    let mut notes = Vec::new();
    let (session, process, docker) = parse_session(&o, KIND, ctx, &mut notes)?;
    if session.id != dir {
        return Err(o.refuse(
            "id",
            format!("{:?} is not the name of its directory {dir:?}", session.id),
        ));
    }
    let parent = o.req_obj("cascading_parent")?;
    let parent_session = parent.req_str("session_id")?;
    if !is_valid_id(parent_session) {
        return Err(parent.refuse(
            "session_id",
            format!("{} is not a session id", quoted(parent_session)),
        ));
    }
    let detail = o.req_obj("subagent")?;
    let policy_text = detail.req_str("policy")?;
    let policy = Policy::parse(policy_text).ok_or_else(|| {
        detail.refuse(
            "policy",
            format!("{} is not ask, deny or approve", quoted(policy_text)),
        )
    })?;
    let lifecycle_text = detail.req_str("lifecycle")?;
    let lifecycle = Lifecycle::parse(lifecycle_text).ok_or_else(|| {
        detail.refuse(
            "lifecycle",
            format!("{} is not a subagent lifecycle", quoted(lifecycle_text)),
        )
    })?;
    let reason = match detail.opt_text("reason")? {
        Some(r) => Some(r.to_owned()),
        None => o.opt_text("error")?.map(str::to_owned),
    };
    let cleanup_attempts = o
        .opt_u64("cleanup_attempts")?
        .unwrap_or(0)
        .min(u64::from(MAX_CLEANUP_ATTEMPTS)) as u32;
    Ok(NodeChild {
        parent_session: parent_session.to_owned(),
        parent_lifecycle: parent.req_str("lifecycle_id")?.to_owned(),
        parent_worker: parent.req_str("worker_id")?.to_owned(),
        lifecycle,
        policy,
        reason,
        cleanup_attempts,
        retry_at_ms: o.opt_u64("retry_at")?.filter(|&ms| ms > 0),
        uncertain_start: o.opt_bool("uncertain_start")?.unwrap_or(false),
        termination_confirmed: o.opt_bool("termination_confirmed")?.unwrap_or(false),
        outcomes: Value::Array(Vec::new()),
        session,
        process,
        docker,
        notes,
    })
}

/// `subagents/<dir>/operations.json`: the child's request outcomes (its
/// `requests`), as this hub's stored outcome tail (the newest
/// [`MAX_OUTCOMES`]). Receipts are not imported: the Node hub keys them by
/// a one-way hash this hub cannot match.
pub fn parse_operations(dir: &str, bytes: &[u8]) -> Result<Value, Refusal> {
    let file = format!("subagents/{dir}/{OPERATIONS}");
    let file = file.as_str();
    let doc = parse_json(bytes, file)?;
    let o = Obj::new(&doc, String::new(), file)?;
    let requests = match o.get("requests") {
        Some(Value::Array(list)) => list,
        Some(other) => {
            return Err(o.refuse(
                "requests",
                format!("must be an array, not {}", kind_of(other)),
            ))
        }
        None => return Err(o.refuse("requests", "is missing")),
    };
    let skip = requests.len().saturating_sub(MAX_OUTCOMES);
    let mut out = Vec::new();
    for (i, entry) in requests.iter().enumerate().skip(skip) {
        let r = Obj::new(entry, format!("requests[{i}]"), file)?;
        let state_text = r.req_str("state")?;
        let state = OutcomeState::parse(state_text).ok_or_else(|| {
            r.refuse(
                "state",
                format!("{} is not a request state", quoted(state_text)),
            )
        })?;
        let outcome = Outcome {
            request_id: r.req_str("request_id")?.to_owned(),
            operation: r.req_str("operation")?.to_owned(),
            state,
            run_id: r.opt_text("run_id")?.map(str::to_owned),
            run_status: r.opt_text("status")?.map(str::to_owned),
            summary: r.opt_str("summary")?.map(|s| Value::String(s.to_owned())),
            error: r.opt_text("detail")?.map(str::to_owned),
            updated_at: r.opt_str("at")?.unwrap_or_default().to_owned(),
        };
        out.push(outcome.to_json());
    }
    Ok(Value::Array(out))
}

/// A `plan.json` (`file` names it in messages).
pub fn parse_plan(file: &str, bytes: &[u8]) -> Result<PlanRecord, Refusal> {
    let doc = parse_json(bytes, file)?;
    let o = Obj::new(&doc, String::new(), file)?;
    let markdown = o
        .opt_str("markdown")?
        .ok_or_else(|| o.refuse("markdown", "is missing"))?;
    if markdown.len() > MAX_PLAN_BYTES {
        return Err(o.refuse(
            "markdown",
            format!("is {} bytes, more than {MAX_PLAN_BYTES}", markdown.len()),
        ));
    }
    let revision = o
        .opt_u64("revision")?
        .ok_or_else(|| o.refuse("revision", "is missing"))?;
    Ok(PlanRecord {
        markdown: markdown.to_owned(),
        revision,
        updated_at: o.opt_str("updated_at")?.map(str::to_owned),
    })
}

/// Puts the parsed files together: drops a `hub.json` entry that is
/// really a headless child with its own `metadata.json` (an older Node
/// hub listed children there too), refuses any other id in the reserved
/// `subagent-` namespace, and computes each child's depth from its parent
/// chain (refusing a loop or a chain deeper than [`MAX_DEPTH`]). `plans`
/// are by session id; plans of sessions not imported are dropped.
pub fn assemble(
    sessions: Vec<NodeSession>,
    children: Vec<NodeChild>,
    plans: Vec<(String, PlanRecord)>,
) -> Result<Batch, Refusal> {
    let child_ids: HashSet<&str> = children.iter().map(|c| c.session.id.as_str()).collect();
    let mut batch = Batch::default();
    for s in sessions {
        if is_child_id(&s.session.id) {
            if child_ids.contains(s.session.id.as_str()) {
                batch.notes.push(format!(
                    "{HUB_JSON}: sessions[{}] ({}) is a headless child; its {METADATA} is \
                     imported instead",
                    s.index, s.session.id
                ));
                continue;
            }
            return Err(Refusal {
                file: HUB_JSON.to_owned(),
                field: format!("sessions[{}].id", s.index),
                problem: format!(
                    "{:?} is in the subagent- namespace this hub reserves for headless \
                     children, and there is no subagents/{}/{METADATA} for it",
                    s.session.id, s.session.id
                ),
            });
        }
        batch.notes.extend(s.notes);
        if let Some(docker) = s.docker {
            batch.docker.push((s.session.id.clone(), docker));
        }
        batch.sessions.push((s.session, s.process));
    }
    let parents: HashMap<&str, &str> = children
        .iter()
        .map(|c| (c.session.id.as_str(), c.parent_session.as_str()))
        .collect();
    let mut depths = Vec::with_capacity(children.len());
    for c in &children {
        let file = format!("subagents/{}/{METADATA}", c.session.id);
        let mut depth = 1u32;
        let mut cursor = c.parent_session.as_str();
        let mut visited = HashSet::from([c.session.id.as_str()]);
        while let Some(&next) = parents.get(cursor) {
            if !visited.insert(cursor) {
                return Err(Refusal {
                    file,
                    field: "cascading_parent.session_id".to_owned(),
                    problem: format!("the parent chain loops through {cursor}"),
                });
            }
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(Refusal {
                    file,
                    field: "cascading_parent.session_id".to_owned(),
                    problem: format!("the parent chain is deeper than {MAX_DEPTH}"),
                });
            }
            cursor = next;
        }
        depths.push(depth);
    }
    for (c, depth) in children.into_iter().zip(depths) {
        let meta = json!({
            "parent": {
                "session_id": c.parent_session,
                "lifecycle_id": c.parent_lifecycle,
                "worker_id": c.parent_worker,
            },
            "depth": depth,
            "lifecycle": c.lifecycle.as_str(),
            "policy": c.policy.as_str(),
            "reason": c.reason,
            "created_at": c.session.created_at,
            "cleanup_attempts": c.cleanup_attempts,
            "retry_at_ms": c.retry_at_ms,
            "automatic_retry": c.cleanup_attempts < MAX_CLEANUP_ATTEMPTS,
            "uncertain_start": c.uncertain_start,
            "termination_confirmed": c.termination_confirmed,
        });
        batch.notes.extend(c.notes);
        if let Some(docker) = c.docker {
            batch.docker.push((c.session.id.clone(), docker));
        }
        let subagent = SubagentRecord {
            id: c.session.id.clone(),
            meta,
            outcomes: c.outcomes,
        };
        batch.children.push((c.session, c.process, subagent));
    }
    let imported: HashSet<String> = batch
        .sessions
        .iter()
        .map(|(s, _)| s.id.clone())
        .chain(batch.children.iter().map(|(s, _, _)| s.id.clone()))
        .collect();
    batch.plans = plans
        .into_iter()
        .filter(|(id, plan)| imported.contains(id) && plan.revision > 0)
        .collect();
    Ok(batch)
}

#[cfg(test)]
mod tests;
