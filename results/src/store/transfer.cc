#include "kforge/results/transfer.h"

#include <map>
#include <set>
#include <tuple>

#include "kforge/core/hash.h"
#include "kforge/core/json.h"

namespace kforge::results {

namespace {

nlohmann::json RunJson(const RunInfo& r) {
  return {{"name", r.name},
          {"config", r.config},
          {"kforge_version", r.kforge_version},
          {"task_suite_hash", r.task_suite_hash},
          {"hardware", r.hardware},
          {"origin", r.origin},
          {"started_at", r.started_at},
          {"finished_at", r.finished_at},
          {"state", r.state}};
}

nlohmann::json SessionJson(const SessionRecord& s) {
  return {{"model", s.key.model},       {"task", s.key.task},   {"strategy", s.key.strategy},
          {"sample", s.key.sample},     {"world", s.key.world}, {"dtype", s.key.dtype},
          {"category", s.key.category}, {"state", s.state},     {"stop_reason", s.stop_reason}};
}

// The run's events that belong to one session (detail.session), by session
// id. Session ids are the store's own, so an export names the session by its
// key instead and leaves "session" out of the detail.
std::map<int64_t, nlohmann::json> SessionEvents(const std::vector<EventRecord>& events) {
  std::map<int64_t, nlohmann::json> out;
  for (const auto& e : events) {
    if (!e.detail.is_object() || !e.detail.contains("session") ||
        !e.detail["session"].is_number_integer())
      continue;
    nlohmann::json detail = e.detail;
    const int64_t sid = detail["session"].get<int64_t>();
    detail.erase("session");
    auto& list = out[sid];
    if (list.is_null()) list = nlohmann::json::array();
    list.push_back({{"kind", e.kind}, {"detail", std::move(detail)}, {"created_at", e.created_at}});
  }
  return out;
}

// What makes two session events the same event, across stores.
std::string EventSignature(const std::string& kind, const nlohmann::json& detail) {
  nlohmann::json d = detail;
  if (d.is_object()) d.erase("session");
  return kind + "\n" + d.dump();
}

nlohmann::json TurnJson(const TurnRecord& t) {
  return nlohmann::json{
      {"index", t.index},
      {"prompt", t.prompt},
      {"reply", t.reply},
      {"feedback", t.feedback},
      {"kernel", t.kernel_sha.empty() ? nlohmann::json(nullptr) : nlohmann::json(t.kernel)},
      {"input_tokens", t.usage.input_tokens},
      {"cached_input_tokens", t.usage.cached_input_tokens},
      {"output_tokens", t.usage.output_tokens},
      {"reasoning_tokens", t.usage.reasoning_tokens},
      {"cost_usd", t.usage.cost_usd},
      {"latency_s", t.latency_s},
      {"request_id", t.request_id},
      {"finish_reason", t.finish_reason},
      {"created_at", t.created_at}};
}

// Applies records to one destination store, remembering what it holds.
class Importer {
 public:
  Importer(RunStore& dest, std::string source) : dest_(dest), source_(std::move(source)) {}

  Status Apply(const nlohmann::json& rec) {
    ++stats_.records;
    if (JsonString(rec, "schema") != "kforge.export/1") {
      return Error(ErrorKind::kInvalidInput, "field \"schema\" must be \"kforge.export/1\"");
    }
    const auto& run = rec.contains("run") ? rec["run"] : nlohmann::json();
    const auto& ses = rec.contains("session") ? rec["session"] : nlohmann::json();
    if (!run.is_object() || JsonString(run, "name").empty()) {
      return Error(ErrorKind::kInvalidInput, "field \"run.name\" is missing");
    }
    if (!ses.is_object() || JsonString(ses, "model").empty() || JsonString(ses, "task").empty()) {
      return Error(ErrorKind::kInvalidInput,
                   "fields \"session.model\" and \"session.task\" are required");
    }
    KF_ASSIGN_OR_RETURN(int64_t run_id, RunId(run));
    SessionKey key{JsonString(ses, "model"),
                   JsonString(ses, "task"),
                   JsonString(ses, "strategy"),
                   static_cast<int>(JsonNumber(ses, "sample")),
                   static_cast<int>(JsonNumber(ses, "world")),
                   JsonString(ses, "dtype"),
                   JsonString(ses, "category")};
    KF_ASSIGN_OR_RETURN(int64_t sid, dest_.UpsertSession(run_id, key));
    if (seen_sessions_.insert(sid).second) {
      ++stats_.sessions;
      KF_ASSIGN_OR_RETURN(SessionRecord current, dest_.GetSession(sid));
      // Only move a session forward: never undo state the destination already has.
      if (current.state == "pending" || current.state == "running") {
        KF_RETURN_IF_ERROR(dest_.SetSessionState(sid, JsonString(ses, "state", "done"),
                                                 JsonString(ses, "stop_reason")));
      }
      KF_ASSIGN_OR_RETURN(auto turns, dest_.ListTurns(sid));
      for (const auto& t : turns) turn_ids_[{sid, t.index}] = t.id;
      KF_ASSIGN_OR_RETURN(auto evals, dest_.ListEvaluations(sid));
      for (const auto& e : evals) eval_ids_[{sid, e.turn_id, e.doc_sha}] = e.id;
    }
    if (ses.contains("events")) KF_RETURN_IF_ERROR(ApplyEvents(run_id, sid, ses["events"]));
    int64_t turn_id = 0;
    bool added = false;
    if (rec.contains("turn") && rec["turn"].is_object()) {
      KF_ASSIGN_OR_RETURN(turn_id, TurnId(sid, rec["turn"], &added));
    }
    if (rec.contains("evaluation") && rec["evaluation"].is_object()) {
      const std::string sha = Sha256Hex(rec["evaluation"].dump(2));
      auto it = eval_ids_.find({sid, turn_id, sha});
      int64_t eid = 0;
      if (it != eval_ids_.end()) {
        eid = it->second;
        ++stats_.duplicates;
      } else {
        KF_ASSIGN_OR_RETURN(eid, dest_.RecordEvaluation(sid, turn_id, rec["evaluation"]));
        eval_ids_[{sid, turn_id, sha}] = eid;
        ++stats_.evaluations_added;
      }
      if (rec.value("best", false)) KF_RETURN_IF_ERROR(dest_.SetBestEvaluation(sid, eid));
    } else if (!added) {
      ++stats_.duplicates;
    }
    return Status::Ok();
  }

  const TransferStats& stats() const { return stats_; }

 private:
  Result<int64_t> RunId(const nlohmann::json& run) {
    const std::string name = JsonString(run, "name");
    if (auto it = run_ids_.find(name); it != run_ids_.end()) return it->second;
    KF_ASSIGN_OR_RETURN(auto existing, dest_.ListRuns());
    for (const auto& r : existing) {
      if (r.name != name) continue;
      const std::string theirs = JsonString(run, "task_suite_hash");
      if (!r.task_suite_hash.empty() && !theirs.empty() && r.task_suite_hash != theirs) {
        return Error(ErrorKind::kInvalidInput,
                     "run \"" + name + "\" already exists with task-suite hash " +
                         r.task_suite_hash + " but the import has " + theirs +
                         ": these runs used different task suites; rename one");
      }
      return run_ids_[name] = r.id;
    }
    KF_ASSIGN_OR_RETURN(
        RunInfo created,
        dest_.CreateOrGetRun(name, run.value("config", nlohmann::json::object()),
                             JsonString(run, "kforge_version"), JsonString(run, "task_suite_hash"),
                             run.value("hardware", nlohmann::json::object())));
    const std::string origin = JsonString(run, "origin");
    KF_RETURN_IF_ERROR(dest_.SetRunOrigin(created.id, origin.empty() ? source_ : origin));
    const std::string state = JsonString(run, "state", "done");
    if (state != "running") KF_RETURN_IF_ERROR(dest_.FinishRun(created.id, state));
    ++stats_.runs_created;
    return run_ids_[name] = created.id;
  }

  // Appends the session's events the destination lacks (its compile-only
  // "compiled" events among them: what makes a session "not evaluated").
  Status ApplyEvents(int64_t run_id, int64_t sid, const nlohmann::json& events) {
    if (!events.is_array())
      return Error(ErrorKind::kInvalidInput, "field \"session.events\" must be an array");
    if (event_runs_.insert(run_id).second) {
      KF_ASSIGN_OR_RETURN(auto existing, dest_.ListEvents(run_id));
      for (const auto& e : existing) {
        if (e.detail.is_object() && e.detail.contains("session") &&
            e.detail["session"].is_number_integer())
          event_sigs_[e.detail["session"].get<int64_t>()].insert(EventSignature(e.kind, e.detail));
      }
    }
    for (const auto& ev : events) {
      const std::string kind = JsonString(ev, "kind");
      if (kind.empty())
        return Error(ErrorKind::kInvalidInput, "field \"session.events[].kind\" is missing");
      nlohmann::json detail = ev.contains("detail") && ev["detail"].is_object()
                                  ? ev["detail"]
                                  : nlohmann::json::object();
      if (!event_sigs_[sid].insert(EventSignature(kind, detail)).second) continue;
      detail["session"] = sid;
      KF_RETURN_IF_ERROR(dest_.AppendEvent(run_id, kind, detail));
    }
    return Status::Ok();
  }

  Result<int64_t> TurnId(int64_t sid, const nlohmann::json& t, bool* added) {
    const int index = static_cast<int>(JsonNumber(t, "index"));
    if (auto it = turn_ids_.find({sid, index}); it != turn_ids_.end()) return it->second;
    TurnRecord tr;
    tr.session_id = sid;
    tr.index = index;
    tr.prompt = JsonString(t, "prompt");
    tr.reply = JsonString(t, "reply");
    tr.feedback = JsonString(t, "feedback");
    tr.kernel = JsonString(t, "kernel");
    tr.usage.input_tokens = static_cast<int64_t>(JsonNumber(t, "input_tokens"));
    tr.usage.cached_input_tokens = static_cast<int64_t>(JsonNumber(t, "cached_input_tokens"));
    tr.usage.output_tokens = static_cast<int64_t>(JsonNumber(t, "output_tokens"));
    tr.usage.reasoning_tokens = static_cast<int64_t>(JsonNumber(t, "reasoning_tokens"));
    tr.usage.cost_usd = JsonNumber(t, "cost_usd");
    tr.latency_s = JsonNumber(t, "latency_s");
    tr.request_id = JsonString(t, "request_id");
    tr.finish_reason = JsonString(t, "finish_reason");
    tr.created_at = JsonNumber(t, "created_at");
    KF_ASSIGN_OR_RETURN(int64_t id, dest_.AppendTurn(tr));
    turn_ids_[{sid, index}] = id;
    ++stats_.turns_added;
    *added = true;
    return id;
  }

  RunStore& dest_;
  std::string source_;
  TransferStats stats_;
  std::map<std::string, int64_t> run_ids_;
  std::set<int64_t> seen_sessions_;
  std::set<int64_t> event_runs_;                         // runs whose events are in event_sigs_
  std::map<int64_t, std::set<std::string>> event_sigs_;  // by destination session
  std::map<std::pair<int64_t, int>, int64_t> turn_ids_;
  // (session, turn, document hash): the same document may judge two turns.
  std::map<std::tuple<int64_t, int64_t, std::string>, int64_t> eval_ids_;
};

}  // namespace

Status ForEachExportRecord(const RunStore& store,
                           const std::function<Status(const nlohmann::json&)>& sink) {
  KF_ASSIGN_OR_RETURN(auto runs, store.ListRuns());
  for (const auto& run : runs) {
    const nlohmann::json run_json = RunJson(run);
    KF_ASSIGN_OR_RETURN(auto sessions, store.ListSessions(run.id));
    KF_ASSIGN_OR_RETURN(auto run_events, store.ListEvents(run.id));
    std::map<int64_t, nlohmann::json> events = SessionEvents(run_events);
    for (const auto& s : sessions) {
      nlohmann::json session_json = SessionJson(s);
      // The session's events travel once, with its first record.
      if (auto it = events.find(s.id); it != events.end()) session_json["events"] = it->second;
      KF_ASSIGN_OR_RETURN(auto turns, store.ListTurns(s.id));
      KF_ASSIGN_OR_RETURN(auto evals, store.ListEvaluations(s.id));
      std::map<int64_t, nlohmann::json> turn_json;
      std::set<int64_t> evaluated_turns;
      for (const auto& t : turns) {
        turn_json[t.id] = TurnJson(t);
      }
      auto record = [&](const nlohmann::json& turn, const nlohmann::json& eval, bool best) {
        nlohmann::json rec{{"schema", "kforge.export/1"}, {"run", run_json},
                           {"session", session_json},     {"turn", turn},
                           {"evaluation", eval},          {"best", best}};
        session_json.erase("events");
        return rec;
      };
      for (const auto& e : evals) {
        KF_ASSIGN_OR_RETURN(nlohmann::json doc, store.GetEvaluationDoc(e));
        auto it = turn_json.find(e.turn_id);
        evaluated_turns.insert(e.turn_id);
        KF_RETURN_IF_ERROR(
            sink(record(it == turn_json.end() ? nlohmann::json(nullptr) : it->second, doc,
                        s.best_evaluation_id && *s.best_evaluation_id == e.id)));
      }
      for (const auto& t : turns) {
        if (!evaluated_turns.count(t.id))
          KF_RETURN_IF_ERROR(sink(record(turn_json[t.id], nullptr, false)));
      }
      if (turns.empty() && evals.empty()) KF_RETURN_IF_ERROR(sink(record(nullptr, nullptr, false)));
    }
  }
  return Status::Ok();
}

Result<TransferStats> ExportJsonl(const RunStore& store, std::ostream& out) {
  TransferStats stats;
  KF_RETURN_IF_ERROR(ForEachExportRecord(store, [&](const nlohmann::json& rec) {
    out << rec.dump() << '\n';
    ++stats.records;
    return out ? Status::Ok() : Error(ErrorKind::kIo, "export: write failed");
  }));
  return stats;
}

Result<TransferStats> ImportJsonl(RunStore& dest, std::istream& in, const std::string& source) {
  Importer importer(dest, source);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto rec = ParseJson(line, source + ":" + std::to_string(line_no));
    if (!rec.ok()) return rec.status();
    Status s = importer.Apply(*rec);
    if (!s.ok()) return s.WithContext(source + ":" + std::to_string(line_no));
  }
  return importer.stats();
}

Result<TransferStats> MergeStore(RunStore& dest, const RunStore& src) {
  Importer importer(dest, src.dir().string());
  KF_RETURN_IF_ERROR(ForEachExportRecord(src, [&](const nlohmann::json& rec) {
    return importer.Apply(rec).WithContext(src.dir().string());
  }));
  return importer.stats();
}

}  // namespace kforge::results
