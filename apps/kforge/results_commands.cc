// Commands over run stores: leaderboard, compare, show, serve, and the
// `results` group (export, import, merge, fixture).
#include <fmt/format.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>

#include "command.h"
#include "exit_codes.h"
#include "json_output.h"
#include "kforge/core/fs.h"
#include "kforge/evaluator/task_select.h"
#include "kforge/results/breach_export.h"
#include "kforge/results/compare.h"
#include "kforge/results/fixture.h"
#include "kforge/results/leaderboard.h"
#include "kforge/results/redteam_board.h"
#include "kforge/results/samples.h"
#include "kforge/results/server.h"
#include "kforge/results/show.h"
#include "kforge/results/store.h"
#include "kforge/results/transfer.h"

namespace kforge::cli {
namespace {

namespace fs = std::filesystem;
using namespace kforge::results;

int Fail(const char* command, const Status& s) { return FailWith(command, s); }

// RUN arguments -> directories; none given = every run under runs_root.
Result<std::vector<fs::path>> RunDirs(const std::vector<std::string>& args,
                                      const fs::path& runs_root) {
  std::vector<fs::path> dirs;
  for (const auto& a : args) {
    KF_ASSIGN_OR_RETURN(fs::path d, ResolveRunDir(a, runs_root));
    dirs.push_back(d);
  }
  if (args.empty()) {
    dirs = ListRunDirs(runs_root);
    if (dirs.empty())
      return Error(ErrorKind::kNotFound, "no runs under " + runs_root.string() + " (pass RUN…)");
  }
  return dirs;
}

// The TASK of `kforge show RUN TASK` in the grammar every command uses
// (kforge/evaluator/task_select.h), over the task keys the run's sessions hold.
Result<std::string> ResolveStoredTask(const RunStore& store, const std::string& selector) {
  std::set<std::string> keys;
  KF_ASSIGN_OR_RETURN(auto runs, store.ListRuns());
  for (const auto& run : runs) {
    KF_ASSIGN_OR_RETURN(auto sessions, store.ListSessions(run.id));
    for (const auto& s : sessions) keys.insert(s.key.task);
  }
  std::vector<eval::TaskRef> suite;
  for (const auto& k : keys) suite.push_back(eval::RefFromKey(k));
  auto picked = eval::SelectTasks({selector}, suite);
  if (!picked.ok() || picked->empty())
    return Error(ErrorKind::kNotFound,
                 fmt::format("no session of task '{}' in {} (its tasks: {})", selector,
                             store.dir().string(), fmt::join(keys, ", ")));
  if (picked->size() > 1)
    return Error(ErrorKind::kInvalidInput,
                 fmt::format("task '{}' names {} tasks ({}); give one", selector, picked->size(),
                             fmt::join(*picked, ", ")));
  return picked->front();
}

Status WriteOutput(const std::string& out, const std::string& text) {
  if (out.empty() || out == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::Ok();
  }
  // A page or an export is for others to read: not the store's 0600.
  return WritePublishedFile(out, text);
}

void AddLeaderboard(CLI::App& app, int& exit_code) {
  struct Opts {
    std::vector<std::string> runs;
    std::string format = "md", by = "model,strategy", out, runs_root = "runs",
                emulated = "separate";
    bool redteam = false;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("leaderboard", "Rank models/strategies over one or more runs");
  cmd->add_option("RUN", o->runs, "run directories or names under --runs-root (default: all)");
  cmd->add_option("--format", o->format, "md | json | csv | html")->capture_default_str();
  cmd->add_option("--by", o->by,
                  "group rows by: model, strategy, category, world, dtype, run (comma-joined)")
      ->capture_default_str();
  cmd->add_option("--emulated", o->emulated, "emulated sessions: separate | exclude | include")
      ->capture_default_str();
  cmd->add_option("-o,--out", o->out, "write to this file instead of stdout");
  cmd->add_option("--runs-root", o->runs_root, "where run names are looked up")
      ->capture_default_str();
  auto* redteam = cmd->add_flag("--redteam", o->redteam,
                                "red-team runs only: attempts and breaches per model and task");
  cmd->get_option("--by")->excludes(redteam);
  cmd->get_option("--emulated")->excludes(redteam);
  cmd->callback([o, &exit_code] {
    auto run = [&]() -> Status {
      KF_ASSIGN_OR_RETURN(LeaderboardFormat format, ParseLeaderboardFormat(o->format));
      if (o->redteam) {
        KF_ASSIGN_OR_RETURN(auto dirs, RunDirs(o->runs, o->runs_root));
        KF_ASSIGN_OR_RETURN(RedTeamBoard board, LoadRedTeamBoard(dirs));
        return WriteOutput(o->out, RenderRedTeam(board, format));
      }
      MetricsOptions options;
      KF_ASSIGN_OR_RETURN(options.group_by, ParseGroupBy(o->by));
      if (o->emulated == "exclude") {
        options.emulated = EmulatedPolicy::kExclude;
      } else if (o->emulated == "include") {
        options.emulated = EmulatedPolicy::kInclude;
      } else if (o->emulated != "separate") {
        return Error(ErrorKind::kInvalidInput, "--emulated: use separate, exclude or include");
      }
      KF_ASSIGN_OR_RETURN(auto dirs, RunDirs(o->runs, o->runs_root));
      KF_ASSIGN_OR_RETURN(auto samples, LoadRunDirs(dirs));
      return WriteOutput(o->out, Render(BuildLeaderboard(std::move(samples), options), format));
    };
    Status s = run();
    exit_code = s.ok() ? 0 : Fail("leaderboard", s);
  });
}

void AddCompare(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string a, b, runs_root = "runs", format = "text";
    std::vector<std::string> runs;
    CompareOptions options;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand(
      "compare", "Compare two runs, models or strategies, with bootstrap intervals");
  cmd->add_option("A", o->a, "RUN, RUN:model=M[,strategy=S], or model=M (with --run)")->required();
  cmd->add_option("B", o->b, "the same forms as A")->required();
  cmd->add_option("--run", o->runs, "runs searched by A/B given without a run (repeatable)");
  cmd->add_option("--resamples", o->options.resamples, "bootstrap resamples")
      ->capture_default_str();
  cmd->add_option("--seed", o->options.seed, "bootstrap seed (same seed, same interval)")
      ->capture_default_str();
  cmd->add_option("--confidence", o->options.confidence, "interval level")->capture_default_str();
  cmd->add_flag("--include-emulated", o->options.include_emulated, "count emulated sessions too");
  cmd->add_option("--format", o->format, "text | json")->capture_default_str();
  cmd->add_option("--runs-root", o->runs_root, "where run names are looked up")
      ->capture_default_str();
  cmd->callback([o, &exit_code] {
    auto run = [&]() -> Status {
      KF_RETURN_IF_ERROR(ValidateCompareOptions(o->options));
      if (o->format != "text" && o->format != "json")
        return Error(ErrorKind::kInvalidInput,
                     "--format: unknown format \"" + o->format + "\" (text, json)");
      std::vector<fs::path> defaults;
      for (const auto& r : o->runs) {
        KF_ASSIGN_OR_RETURN(fs::path d, ResolveRunDir(r, o->runs_root));
        defaults.push_back(d);
      }
      KF_ASSIGN_OR_RETURN(Selector a, ParseSelector(o->a, o->runs_root, defaults));
      KF_ASSIGN_OR_RETURN(Selector b, ParseSelector(o->b, o->runs_root, defaults));
      auto side = [](const Selector& sel) -> Result<std::vector<SampleOutcome>> {
        KF_ASSIGN_OR_RETURN(auto all, LoadRunDirs(sel.run_dirs));
        std::vector<SampleOutcome> mine;
        for (auto& s : all) {
          if (Matches(sel, s)) mine.push_back(std::move(s));
        }
        if (mine.empty())
          return Error(ErrorKind::kNotFound, "\"" + sel.label + "\" matches no evaluated session");
        return mine;
      };
      KF_ASSIGN_OR_RETURN(auto sa, side(a));
      KF_ASSIGN_OR_RETURN(auto sb, side(b));
      const Comparison c = Compare(sa, sb, a.label, b.label, o->options);
      const std::string text =
          o->format == "json" ? RenderComparisonJson(c) : RenderComparisonText(c);
      return WriteOutput("", text);
    };
    Status s = run();
    exit_code = s.ok() ? 0 : Fail("compare", s);
  });
}

// `kforge show RUN --export-breach N`: the breach's kernel under a header the
// fixer completes (kforge/results/breach_export.h).
Status ExportBreach(const RunStore& store, const ShowOptions& select, int turn,
                    const std::string& to, const std::string& json) {
  KF_ASSIGN_OR_RETURN(BreachExport e, PrepareBreachExport(store, select, turn));
  KF_ASSIGN_OR_RETURN(fs::path path, WriteBreachExport(e, to));
  if (!json.empty()) {
    KF_RETURN_IF_ERROR(WriteJson(json, BreachExportJson(e, path)));
    if (json == "-") return Status::Ok();
  }
  std::printf(
      "wrote %s\nnext: say in its header what it does and replace %s on its Expected: line with "
      "the verdict the fixed evaluator must give; then fix the evaluator and add the file to its "
      "test (docs/integrity.md, \"kforge red-teams kforge\")\n",
      path.c_str(), kExpectedPlaceholder);
  return Status::Ok();
}

void AddShow(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string run, runs_root = "runs", json, to = "tests/adversarial/kernels";
    ShowOptions show;
    int export_breach = 0;
  };
  auto o = std::make_shared<Opts>();
  auto* cmd = app.add_subcommand("show", "Print a run's sessions turn by turn");
  cmd->add_option("RUN", o->run, "run directory or name")->required();
  cmd->add_option("TASK", o->show.task, "only this task");
  cmd->add_option("--model", o->show.model, "only this model");
  cmd->add_option("--strategy", o->show.strategy, "only this strategy");
  cmd->add_option("--sample", o->show.sample, "only this sample index");
  cmd->add_option("--session", o->show.session, "only this session (its id, as show prints it)");
  cmd->add_flag("--full", o->show.full, "print prompts, replies and kernels whole");
  auto* export_breach = cmd->add_option(
      "--export-breach", o->export_breach,
      "write the red-team breach at this turn (from 1, as show prints it) as an exploit kernel");
  cmd->add_option("--to", o->to, "where --export-breach writes")
      ->capture_default_str()
      ->needs(export_breach);
  AddJsonOption(cmd, o->json);
  cmd->add_option("--runs-root", o->runs_root, "where run names are looked up")
      ->capture_default_str();
  cmd->callback([o, export_breach, &exit_code] {
    auto run = [&]() -> Status {
      KF_ASSIGN_OR_RETURN(fs::path dir, ResolveRunDir(o->run, o->runs_root));
      KF_ASSIGN_OR_RETURN(auto store, RunStore::Open(dir, true));
      if (!o->show.task.empty()) {
        KF_ASSIGN_OR_RETURN(o->show.task, ResolveStoredTask(*store, o->show.task));
      }
      if (export_breach->count() > 0)
        return ExportBreach(*store, o->show, o->export_breach, o->to, o->json);
      if (!o->json.empty()) {
        KF_ASSIGN_OR_RETURN(nlohmann::json doc, RenderShowJson(*store, o->show));
        KF_RETURN_IF_ERROR(WriteJson(o->json, doc));
        if (o->json == "-") return Status::Ok();
      }
      KF_ASSIGN_OR_RETURN(std::string text, RenderShowText(*store, o->show));
      return WriteOutput("", text);
    };
    Status s = run();
    exit_code = s.ok() ? 0 : Fail("show", s);
  });
}

Server* g_server = nullptr;
extern "C" void StopServer(int) {
  if (g_server) g_server->Stop();
}

void AddServe(CLI::App& app, int& exit_code) {
  struct Opts {
    std::vector<std::string> runs;
    ServerOptions server;
    std::string runs_root = "runs";
  };
  auto o = std::make_shared<Opts>();
  auto* cmd =
      app.add_subcommand("serve", "Web UI over run stores (leaderboard, runs, sessions, tasks)");
  cmd->add_option("RUN", o->runs,
                  "runs to serve (default: every run under --runs-root, rescanned)");
  cmd->add_option("--port", o->server.port, "TCP port (0 = any free port)")->capture_default_str();
  cmd->add_option("--host", o->server.host, "address to listen on; loopback keeps it private")
      ->capture_default_str();
  cmd->add_option("--runs-root", o->runs_root, "where runs live")->capture_default_str();
  cmd->callback([o, &exit_code] {
    auto run = [&]() -> Status {
      o->server.runs_root = o->runs_root;
      for (const auto& r : o->runs) {
        KF_ASSIGN_OR_RETURN(fs::path d, ResolveRunDir(r, o->runs_root));
        o->server.run_dirs.push_back(d);
      }
      KF_ASSIGN_OR_RETURN(auto server, Server::Bind(o->server));
      if (o->server.host != "127.0.0.1" && o->server.host != "localhost" &&
          o->server.host != "::1") {
        std::fprintf(
            stderr,
            "kforge serve: listening on %s: pages (prompts, kernels) are visible to the network\n",
            o->server.host.c_str());
      }
      std::printf("kforge serve: http://%s:%d/  (Ctrl-C stops)\n", o->server.host.c_str(),
                  server->port());
      std::fflush(stdout);
      g_server = server.get();
      std::signal(SIGINT, StopServer);
      std::signal(SIGTERM, StopServer);
      Status s = server->Run();
      g_server = nullptr;
      return s;
    };
    Status s = run();
    exit_code = s.ok() ? 0 : Fail("serve", s);
  });
}

void AddResults(CLI::App& app, int& exit_code) {
  struct Opts {
    std::string run, out, dest, input, runs_root = "runs";
    std::vector<std::string> sources;
    FixtureSpec fixture;
  };
  auto o = std::make_shared<Opts>();
  auto* group = app.add_subcommand("results", "Move runs between stores");
  group->require_subcommand(1);
  auto* exp = group->add_subcommand("export", "Write every evaluation of a run as JSON Lines");
  exp->add_option("RUN", o->run, "run directory or name")->required();
  exp->add_option("-o,--out", o->out, "output file (default stdout)");
  exp->add_option("--runs-root", o->runs_root)->capture_default_str();
  exp->callback([o, &exit_code] {
    auto run = [&]() -> Status {
      KF_ASSIGN_OR_RETURN(fs::path dir, ResolveRunDir(o->run, o->runs_root));
      KF_ASSIGN_OR_RETURN(auto store, RunStore::Open(dir, true));
      std::ostringstream text;
      KF_ASSIGN_OR_RETURN(TransferStats stats, ExportJsonl(*store, text));
      KF_RETURN_IF_ERROR(WriteOutput(o->out, text.str()));
      std::fprintf(stderr, "exported %d records\n", stats.records);
      return Status::Ok();
    };
    Status s = run();
    exit_code = s.ok() ? 0 : Fail("results export", s);
  });
  auto* imp =
      group->add_subcommand("import", "Add a JSON Lines export into a run store (idempotent)");
  imp->add_option("DEST", o->dest, "destination run directory (created if absent)")->required();
  imp->add_option("FILE", o->input, "export file")->required();
  imp->callback([o, &exit_code] {
    auto run = [&]() -> Status {
      std::ifstream in(o->input);
      if (!in) return Error(ErrorKind::kNotFound, "cannot read " + o->input);
      KF_ASSIGN_OR_RETURN(auto store, RunStore::Open(o->dest));
      KF_ASSIGN_OR_RETURN(TransferStats st, ImportJsonl(*store, in, o->input));
      std::printf(
          "%d records: %d runs created, %d turns and %d evaluations added, %d already present\n",
          st.records, st.runs_created, st.turns_added, st.evaluations_added, st.duplicates);
      return Status::Ok();
    };
    Status s = run();
    exit_code = s.ok() ? 0 : Fail("results import", s);
  });
  auto* merge =
      group->add_subcommand("merge", "Merge run stores (e.g. from several machines) into one");
  merge->add_option("DEST", o->dest, "destination run directory (created if absent)")->required();
  merge->add_option("SRC", o->sources, "source run directories")->required();
  merge->callback([o, &exit_code] {
    auto run = [&]() -> Status {
      KF_ASSIGN_OR_RETURN(auto dest, RunStore::Open(o->dest));
      for (const auto& src_dir : o->sources) {
        KF_ASSIGN_OR_RETURN(auto src, RunStore::Open(src_dir, true));
        KF_ASSIGN_OR_RETURN(TransferStats st, MergeStore(*dest, *src));
        std::printf("%s: %d turns and %d evaluations added, %d already present\n", src_dir.c_str(),
                    st.turns_added, st.evaluations_added, st.duplicates);
      }
      return Status::Ok();
    };
    Status s = run();
    exit_code = s.ok() ? 0 : Fail("results merge", s);
  });
  auto* fx = group->add_subcommand("fixture", "Write a synthetic run (for demos and UI checks)");
  fx->add_option("DIR", o->dest, "run directory to create")->required();
  fx->add_option("--tasks", o->fixture.tasks)->capture_default_str();
  fx->add_option("--samples", o->fixture.samples)->capture_default_str();
  fx->add_option("--seed", o->fixture.seed)->capture_default_str();
  fx->callback([o, &exit_code] {
    o->fixture.run_name = fs::path(o->dest).filename().string();
    Status s = WriteFixtureRun(o->dest, o->fixture);
    exit_code = s.ok() ? 0 : Fail("results fixture", s);
  });
}

KF_COMMAND("leaderboard", AddLeaderboard);
KF_COMMAND("compare", AddCompare);
KF_COMMAND("show", AddShow);
KF_COMMAND("serve", AddServe);
KF_COMMAND("results", AddResults);

}  // namespace
}  // namespace kforge::cli
