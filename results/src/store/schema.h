// The store's schema as a list of migrations: step N turns version N-1 into
// version N. A fresh store runs every step, so the migration path is the same
// code that builds new stores.
#pragma once

#include <filesystem>
#include <functional>

#include "kforge/core/status.h"
#include "sqlite_db.h"

namespace kforge::results::internal {

// The schema version stored in PRAGMA user_version (0 = empty database).
Result<int> SchemaVersion(Db& db);

// Reads a blob's text by hash; migrations that backfill columns from stored
// documents need it.
using BlobReader = std::function<Result<std::string>(const std::string& sha)>;

// Applies every step after the current version up to `target`, each in its
// own transaction. Tests pass target=1 to build a store of the previous version.
Status MigrateTo(Db& db, int target, const BlobReader& blobs);

}  // namespace kforge::results::internal
