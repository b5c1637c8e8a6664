#include "run/warm_groups.h"

#include <stdlib.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "kforge/core/log.h"

namespace kforge::eval {

namespace fs = std::filesystem;

void SpawnedGroup::Discard() {
  if (group) group->Kill();
  group.reset();
  mailboxes.clear();
  if (!dir.empty()) {
    std::error_code ec;
    fs::permissions(dir, fs::perms::owner_all, ec);
    fs::remove_all(dir, ec);
    dir.clear();
  }
}

Result<SpawnedGroup> SpawnGroup(GroupOptions shape) {
  SpawnedGroup sg;
  std::string tmpl = (fs::temp_directory_path() / "kforge-candidate-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return Error(ErrorKind::kIo, "mkdtemp failed for " + tmpl);
  sg.dir = tmpl;
  shape.candidate_dir = sg.dir.string();
  shape.mailbox_fds.clear();
  for (int r = 0; r < shape.world; ++r) {
    auto m = proto::Mailbox::Create();
    if (!m.ok()) {
      sg.Discard();
      return m.status();
    }
    shape.mailbox_fds.push_back(m->fd());
    sg.mailboxes.push_back(std::move(m).value());
  }
  auto started = WorkerGroup::Start(shape);
  if (!started.ok()) {
    sg.Discard();
    return started.status();
  }
  sg.group = std::move(started).value();
  return sg;
}

std::string ShapeKey(const GroupOptions& o) {
  nlohmann::json k = {{"worker", o.worker_path.string()},
                      {"role", o.role},
                      {"world", o.world},
                      {"devices", o.devices},
                      {"emulated", o.emulated},
                      {"mps_dir", o.mps_dir},
                      {"env", o.env},
                      {"nccl", o.candidate_nccl},
                      {"profile_rank0", o.profile_rank0},
                      {"capture_output", o.capture_output}};
  return k.dump();
}

namespace {

// Where the pool keeps a group: its purpose and its shape.
std::string PoolKey(const std::string& purpose, const GroupOptions& shape) {
  return purpose + "|" + ShapeKey(shape);
}

}  // namespace

WarmGroups::~WarmGroups() {
  Settle();
  Clear();
}

Result<SpawnedGroup> WarmGroups::Acquire(const std::string& purpose, const GroupOptions& shape) {
  const std::string key = PoolKey(purpose, shape);
  std::unique_ptr<SpawnedGroup> waiting;
  {
    MutexLock lock(&mu_);
    // A refill of this shape under way is waited for: it is further along
    // than a group started now would be.
    changed_.Wait(lock, [&]() REQUIRES(mu_) {
      return std::none_of(entries_.begin(), entries_.end(),
                          [&](const Entry& e) { return e.key == key && !e.group; });
    });
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.key == key; });
    if (it != entries_.end()) {
      waiting = std::move(it->group);
      entries_.erase(it);
    }
  }
  if (waiting) {
    if (waiting->group && waiting->group->alive() && waiting->group->ExitedRank() < 0) {
      waiting->warm = true;
      return std::move(*waiting);
    }
    LogWarn("evaluator", "a warm {} group died while it waited; starting a fresh one", purpose);
    waiting->Discard();
  }
  return SpawnGroup(shape);
}

void WarmGroups::Refill(const std::vector<WarmShape>& wanted) {
  if (!enabled_) return;
  std::vector<std::string> keep;
  for (const WarmShape& w : wanted) keep.push_back(PoolKey(w.purpose, w.options));
  for (const WarmShape& w : wanted) RefillOne(w, keep);
}

void WarmGroups::RefillOne(const WarmShape& wanted, const std::vector<std::string>& keep) {
  const std::string key = PoolKey(wanted.purpose, wanted.options);
  const int ranks = wanted.options.world;
  if (ranks > max_waiting_ranks_) return;
  std::vector<std::unique_ptr<SpawnedGroup>> evicted;
  MutexLock lock(&mu_);
  if (std::any_of(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; }))
    return;
  // Room: the longest-waiting groups make way (entries_ is oldest first),
  // but neither one this call wants nor one still being started.
  int waiting = 0;
  for (const Entry& e : entries_) waiting += e.ranks;
  std::vector<size_t> victims;
  for (size_t i = 0; i < entries_.size() && waiting + ranks > max_waiting_ranks_; ++i) {
    const Entry& e = entries_[i];
    if (!e.group || std::find(keep.begin(), keep.end(), e.key) != keep.end()) continue;
    victims.push_back(i);
    waiting -= e.ranks;
  }
  if (waiting + ranks > max_waiting_ranks_) return;  // no room even so: nothing is killed
  for (auto i = victims.rbegin(); i != victims.rend(); ++i) {
    evicted.push_back(std::move(entries_[*i].group));
    entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(*i));
  }
  entries_.push_back({key, ranks, nullptr});
  threads_.emplace_back([this, wanted, key] {
    auto started = SpawnGroup(wanted.options);
    if (!started.ok()) {
      LogWarn("evaluator", "starting a warm {} group failed: {}", wanted.purpose,
              started.status().message());
    }
    MutexLock done(&mu_);
    auto it = std::find_if(entries_.begin(), entries_.end(),
                           [&](const Entry& e) { return e.key == key && !e.group; });
    if (started.ok() && it != entries_.end()) {
      it->group = std::make_unique<SpawnedGroup>(std::move(started).value());
    } else if (it != entries_.end()) {
      entries_.erase(it);
    }
    changed_.NotifyAll();
  });
  lock.Unlock();
  for (auto& g : evicted) g->Discard();
}

void WarmGroups::Settle() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(&mu_);
    changed_.Wait(lock, [this]() REQUIRES(mu_) { return !Starting(); });
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

void WarmGroups::Clear() {
  std::vector<std::unique_ptr<SpawnedGroup>> gone;
  {
    MutexLock lock(&mu_);
    // Entries still being started stay: their threads fill them in.
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->group) {
        gone.push_back(std::move(it->group));
        it = entries_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& g : gone) g->Discard();
}

bool WarmGroups::Starting() const {
  return std::any_of(entries_.begin(), entries_.end(),
                     [](const Entry& e) { return e.group == nullptr; });
}

int WarmGroups::waiting_ranks() const {
  MutexLock lock(&mu_);
  int ranks = 0;
  for (const Entry& e : entries_)
    if (e.group) ranks += e.ranks;
  return ranks;
}

size_t WarmGroups::size() const {
  MutexLock lock(&mu_);
  return static_cast<size_t>(std::count_if(entries_.begin(), entries_.end(),
                                           [](const Entry& e) { return e.group != nullptr; }));
}

}  // namespace kforge::eval
