#include "web_pages.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>

#include "kforge/results/leaderboard.h"
#include "kforge/results/store.h"
#include "report/line_diff.h"
#include "web/highlight.h"
#include "web/html.h"

namespace kforge::results::web {

namespace fs = std::filesystem;

namespace {

std::string Nav() { return "<p class=\"note\"><a href=\"/\">leaderboard</a> · kforge</p>"; }

std::string StatusTag(Verdict verdict, bool emulated) {
  std::string tag =
      fmt::format("<span class=\"tag {}\">{}</span>",
                  verdict == Verdict::kPassed ? "passed" : "failed", VerdictName(verdict));
  if (emulated) tag += " <span class=\"tag emulated\">emulated</span>";
  return tag;
}

std::string Details(const std::string& summary, const std::string& inner, bool open = false) {
  return fmt::format("<details{}><summary>{}</summary>{}</details>", open ? " open" : "",
                     HtmlEscape(summary), inner);
}

std::string Pre(const std::string& text) { return "<pre>" + HtmlEscape(text) + "</pre>"; }

struct Counts {
  std::map<std::string, int> by_state;
  int evaluations = 0, passed = 0;
};

Result<Counts> CountRun(const RunStore& store) {
  Counts c;
  for (const char* s : {"pending", "running", "done", "stopped"}) c.by_state[s] = 0;
  KF_ASSIGN_OR_RETURN(auto runs, store.ListRuns());
  for (const auto& run : runs) {
    KF_ASSIGN_OR_RETURN(auto sessions, store.ListSessions(run.id));
    for (const auto& s : sessions) ++c.by_state[s.state];
    KF_ASSIGN_OR_RETURN(auto evals, store.ListRunEvaluations(run.id));
    c.evaluations += static_cast<int>(evals.size());
    for (const auto& e : evals) c.passed += e.verdict == Verdict::kPassed;
  }
  return c;
}

// Live progress: poll the JSON endpoint and update the counters in place;
// reload once the run stops so the final tables appear.
constexpr const char* kLiveScript = R"js(
(function () {
  var box = document.getElementById('progress');
  if (!box || box.getAttribute('data-state') !== 'running') return;
  setInterval(function () {
    fetch(box.getAttribute('data-api')).then(function (r) { return r.json(); }).then(function (j) {
      for (var k in j.counts) {
        var e = document.getElementById('count-' + k);
        if (e) e.textContent = j.counts[k];
      }
      if (j.state !== 'running') location.reload();
    }).catch(function () {});
  }, 3000);
})();
)js";

}  // namespace

Result<fs::path> FindRun(const Site& site, const std::string& key) {
  for (const auto& dir : site.run_dirs) {
    if (dir.filename().string() == key) return dir;
  }
  return Error(ErrorKind::kNotFound, "no run \"" + key + "\"");
}

Result<std::string> LeaderboardPage(const Site& site, const std::string& by) {
  MetricsOptions options;
  KF_ASSIGN_OR_RETURN(options.group_by, ParseGroupBy(by.empty() ? "model,strategy" : by));
  // One unreadable store (damaged, foreign) must not hide every other run:
  // it is left out and named above the table.
  std::vector<SampleOutcome> samples;
  std::string skipped;
  for (const auto& dir : site.run_dirs) {
    auto one = LoadRunDirs({dir});
    if (!one.ok()) {
      skipped += "<li>" + HtmlEscape(one.status().message()) + "</li>";
      continue;
    }
    samples.insert(samples.end(), one->begin(), one->end());
  }
  const Leaderboard board = BuildLeaderboard(std::move(samples), options);
  std::string body = "<h1>kforge leaderboard</h1>";
  if (!skipped.empty())
    body +=
        "<div class=\"note\" id=\"skipped-runs\"><p>Left out (the store cannot be read):</p><ul>" +
        skipped + "</ul></div>";
  body += "<p class=\"note\">Group by: ";
  for (const char* g : {"model,strategy", "model", "strategy", "model,category", "model,world"}) {
    body += fmt::format("<a href=\"/?by={0}\">{0}</a> ", g);
  }
  body += "</p>" + RenderHtmlBody(board) +
          "<h2>Runs</h2><table class=\"runs\"><tr><th class=\"l\">run</th>"
          "<th class=\"l\">state</th><th>sessions done</th><th>evaluations</th></tr>";
  for (const auto& dir : site.run_dirs) {
    auto store = RunStore::Open(dir, true);
    if (!store.ok()) continue;
    auto runs = (*store)->ListRuns();
    auto counts = CountRun(**store);
    if (!runs.ok() || !counts.ok()) continue;
    const std::string state = runs->empty() ? "empty" : runs->back().state;
    int total = 0;
    for (const auto& [s, n] : counts->by_state) total += n;
    body += fmt::format(
        "<tr><td class=\"l\"><a href=\"/run/{0}\">{0}</a></td><td class=\"l\">{1}</td>"
        "<td>{2} / {3}</td><td>{4}</td></tr>",
        HtmlEscape(dir.filename().string()), HtmlEscape(state),
        counts->by_state["done"] + counts->by_state["stopped"], total, counts->evaluations);
  }
  body += "</table>";
  return HtmlDocument("kforge leaderboard", body);
}

Result<std::string> RunProgressJson(const Site& site, const std::string& run_key) {
  KF_ASSIGN_OR_RETURN(fs::path dir, FindRun(site, run_key));
  KF_ASSIGN_OR_RETURN(auto store, RunStore::Open(dir, true));
  KF_ASSIGN_OR_RETURN(auto runs, store->ListRuns());
  KF_ASSIGN_OR_RETURN(Counts c, CountRun(*store));
  nlohmann::json j;
  j["state"] = runs.empty() ? "empty" : runs.back().state;
  for (const auto& [state, n] : c.by_state) j["counts"][state] = n;
  j["counts"]["evaluations"] = c.evaluations;
  j["counts"]["passed"] = c.passed;
  return j.dump();
}

Result<std::string> RunPage(const Site& site, const std::string& run_key) {
  KF_ASSIGN_OR_RETURN(fs::path dir, FindRun(site, run_key));
  KF_ASSIGN_OR_RETURN(auto store, RunStore::Open(dir, true));
  KF_ASSIGN_OR_RETURN(auto runs, store->ListRuns());
  KF_ASSIGN_OR_RETURN(Counts c, CountRun(*store));
  const std::string key = HtmlEscape(run_key);
  const std::string state = runs.empty() ? "empty" : runs.back().state;
  std::string body = Nav() + "<h1>Run " + key + "</h1>";
  for (const auto& run : runs) {
    body += fmt::format("<p>{} · state <b>{}</b> · kforge {} · task suite {}{}</p>",
                        HtmlEscape(run.name), HtmlEscape(run.state), HtmlEscape(run.kforge_version),
                        HtmlEscape(run.task_suite_hash.substr(0, 12)),
                        run.origin.empty() ? "" : " · from " + HtmlEscape(run.origin));
    body += Details("hardware card", Pre(run.hardware.dump(2))) +
            Details("configuration", Pre(run.config.dump(2)));
  }
  body += fmt::format(
      "<div id=\"progress\" data-state=\"{}\" data-api=\"/api/run/{}/progress\"><table><tr>",
      HtmlEscape(state), key);
  for (const char* k : {"pending", "running", "done", "stopped", "evaluations", "passed"})
    body += fmt::format("<th>{}</th>", k);
  body += "</tr><tr>";
  for (const char* k : {"pending", "running", "done", "stopped"}) {
    body += fmt::format("<td id=\"count-{}\">{}</td>", k, c.by_state[k]);
  }
  body += fmt::format(
      "<td id=\"count-evaluations\">{}</td><td id=\"count-passed\">{}</td></tr></table></div>",
      c.evaluations, c.passed);
  MetricsOptions options;
  KF_ASSIGN_OR_RETURN(auto samples, LoadSamples(*store));
  std::map<int64_t, const SampleOutcome*> outcome;
  for (const auto& s : samples) outcome[s.session_id] = &s;
  // A run no GPU judged says so first: its leaderboard has no verdicts or speedups.
  const auto compiled_only = std::count_if(samples.begin(), samples.end(),
                                           [](const SampleOutcome& s) { return s.compiled_only; });
  if (compiled_only > 0) {
    body += fmt::format(
        "<p class=\"banner\">No GPU judged {} of the {} sessions of this run: their kernels were "
        "compiled and policy-checked only, so they have no verdict or speedup. <code>kforge run "
        "--resume {}</code> on a GPU machine evaluates the recorded kernels.</p>",
        compiled_only, samples.size(), key);
  }
  body += "<h2>Leaderboard for this run</h2>" + RenderHtmlBody(BuildLeaderboard(samples, options));
  body +=
      "<h2>Sessions</h2><div class=\"table-wrap\"><table class=\"sessions\"><tr><th "
      "class=\"l\">model</th><th "
      "class=\"l\">task</th>"
      "<th class=\"l\">strategy</th><th>sample</th><th>world</th><th "
      "class=\"l\">state</th><th>turns</th>"
      "<th class=\"l\">best</th><th>speedup</th></tr>";
  for (const auto& run : runs) {
    KF_ASSIGN_OR_RETURN(auto sessions, store->ListSessions(run.id));
    for (const auto& s : sessions) {
      auto it = outcome.find(s.id);
      const SampleOutcome* o = it == outcome.end() ? nullptr : it->second;
      body += fmt::format(
          "<tr><td class=\"l\">{}</td><td class=\"l\"><a href=\"/task/{}\">{}</a></td><td "
          "class=\"l\">{}</td>"
          "<td>{}</td><td>{}</td><td class=\"l\"><a "
          "href=\"/session/{}/{}\">{}</a></td><td>{}</td><td class=\"l\">{}</td>"
          "<td>{}</td></tr>",
          HtmlEscape(s.key.model), HtmlEscape(s.key.task), HtmlEscape(s.key.task),
          HtmlEscape(s.key.strategy), s.key.sample, s.key.world, key, s.id, HtmlEscape(s.state),
          s.turns_done,
          o && o->not_evaluated
              ? "<span class=\"tag\" title=\"" + HtmlEscape(o->not_evaluated_reason) +
                    "\">not evaluated</span>"
          : o && o->verdict ? StatusTag(*o->verdict, o->emulated)
                            : "—",
          o && o->speedup ? fmt::format("{:.3f}x", *o->speedup) : "—");
    }
  }
  body += "</table></div>";
  return HtmlDocument("kforge run " + run_key, body, kLiveScript);
}

Result<std::string> SessionPage(const Site& site, const std::string& run_key, int64_t session_id) {
  KF_ASSIGN_OR_RETURN(fs::path dir, FindRun(site, run_key));
  KF_ASSIGN_OR_RETURN(auto store, RunStore::Open(dir, true));
  KF_ASSIGN_OR_RETURN(SessionRecord s, store->GetSession(session_id));
  KF_ASSIGN_OR_RETURN(auto turns, store->ListTurns(s.id));
  KF_ASSIGN_OR_RETURN(auto evals, store->ListEvaluations(s.id));
  std::string body = Nav() + fmt::format("<p class=\"note\"><a href=\"/run/{0}\">run {0}</a></p>",
                                         HtmlEscape(run_key));
  body += fmt::format(
      "<h1>{} · {} · {}</h1><p>sample {} · world {} · {} · state <b>{}</b>{} · {} turns</p>",
      HtmlEscape(s.key.model), HtmlEscape(s.key.task), HtmlEscape(s.key.strategy), s.key.sample,
      s.key.world, HtmlEscape(s.key.dtype), HtmlEscape(s.state),
      s.stop_reason.empty() ? "" : " (" + HtmlEscape(s.stop_reason) + ")", s.turns_done);
  std::string previous;
  bool have_previous = false;
  for (const auto& t : turns) {
    body += fmt::format(
        "<div class=\"turn\" id=\"turn-{0}\"><h2>Turn {5}</h2><p class=\"note\">{1} in · {2} out "
        "tokens · ${3:.4f} · {4:.1f} s</p>",
        t.index, t.usage.input_tokens, t.usage.output_tokens, t.usage.cost_usd, t.latency_s,
        t.index + 1);  // counted from 1, as the feedback counts ("Turn 1 of 4")
    body += Details("prompt", Pre(t.prompt)) + Details("reply", Pre(t.reply));
    if (!t.kernel_sha.empty()) {
      const std::string& kernel = t.kernel;
      body += Details("kernel " + t.kernel_sha.substr(0, 12),
                      "<pre class=\"code\">" + HighlightCuda(kernel) + "</pre>", true);
      if (have_previous) {
        body += Details(
            "diff to the previous kernel",
            kernel == previous ? "<p>unchanged</p>" : DiffHtml(DiffLines(previous, kernel)), true);
      }
      previous = kernel;
      have_previous = true;
    }
    for (const auto& e : evals) {
      if (e.turn_id != t.id) continue;
      const bool best = s.best_evaluation_id && *s.best_evaluation_id == e.id;
      body += fmt::format(
          "<p class=\"evaluation\">Evaluation: {}{}{}{} — {}</p>", StatusTag(e.verdict, e.emulated),
          e.speedup ? fmt::format(" <b>{:.3f}x</b>", *e.speedup) : "",
          e.expert_speedup ? fmt::format(" ({:.3f}x the expert's speed)", *e.expert_speedup) : "",
          best ? " (best)" : "", HtmlEscape(e.message));
      auto doc = store->GetEvaluationDoc(e);
      if (doc.ok())
        body += Details("evaluation document (per-rank details, timings)", Pre(doc->dump(2)));
    }
    if (!t.feedback.empty()) body += Details("feedback", Pre(t.feedback), true);
    body += "</div>";
  }
  return HtmlDocument("kforge session " + std::to_string(session_id), body);
}

namespace {

// A task as the CLI names it: its key ("001_allreduce"), its number ("1") or
// its name ("allreduce").
bool NamesTask(const std::string& key, const std::string& selector) {
  if (key == selector) return true;
  const size_t cut = key.find('_');
  if (cut == std::string::npos) return false;
  if (key.compare(cut + 1, std::string::npos, selector) == 0) return true;
  const bool digits = !selector.empty() && selector.size() <= 6 &&
                      std::all_of(selector.begin(), selector.end(), [](char c) {
                        return std::isdigit(static_cast<unsigned char>(c));
                      });
  return digits && cut <= 6 && std::stoi(key.substr(0, cut)) == std::stoi(selector);
}

}  // namespace

Result<std::string> TaskPage(const Site& site, const std::string& task) {
  std::string body = Nav() + "<h1>Task " + HtmlEscape(task) +
                     "</h1><p class=\"note\">Each model's best kernel: "
                     "the fastest correct one on real hardware (emulated timings marked).</p>";
  // (model, strategy) -> best sample; correct beats incorrect, then speedup, real beats emulated.
  std::map<std::pair<std::string, std::string>, SampleOutcome> best;
  for (const auto& dir : site.run_dirs) {
    KF_ASSIGN_OR_RETURN(auto samples, LoadRunDirs({dir}));
    for (auto& s : samples) {
      if (!NamesTask(s.task, task)) continue;
      auto key = std::make_pair(s.model, s.strategy);
      auto it = best.find(key);
      auto score = [](const SampleOutcome& o) {
        return std::make_tuple(o.correct, !o.not_evaluated, !o.emulated, o.speedup.value_or(0));
      };
      if (it == best.end() || score(s) > score(it->second)) best[key] = s;
    }
  }
  if (best.empty()) return Error(ErrorKind::kNotFound, "no session of task \"" + task + "\"");
  for (const auto& [key, s] : best) {
    body += fmt::format("<h2>{} · {}</h2><p>{}{} · <a href=\"/session/{}/{}\">session</a></p>",
                        HtmlEscape(key.first), HtmlEscape(key.second),
                        s.not_evaluated ? "not evaluated: " + HtmlEscape(s.not_evaluated_reason)
                        : !s.verdict    ? std::string("not evaluated")
                                        : StatusTag(*s.verdict, s.emulated),
                        s.speedup ? fmt::format(" <b>{:.3f}x</b>", *s.speedup) : "",
                        HtmlEscape(s.run_dir.filename().string()), s.session_id);
    // A session nothing evaluated has no best kernel to show (its last
    // evaluated one may not even compile).
    if (!s.best_kernel_sha.empty() && !s.not_evaluated) {
      auto store = RunStore::Open(s.run_dir, true);
      if (!store.ok()) continue;
      auto kernel = (*store)->GetBlob(s.best_kernel_sha);
      if (kernel.ok()) body += "<pre class=\"code\">" + HighlightCuda(*kernel) + "</pre>";
    }
  }
  return HtmlDocument("kforge task " + task, body);
}

}  // namespace kforge::results::web
