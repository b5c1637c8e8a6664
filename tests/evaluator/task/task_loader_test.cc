#include <gtest/gtest.h>

#include <fstream>

#include "kforge/evaluator/task.h"
#include "task_fixture.h"

namespace kforge::eval {
namespace {

using testing::LineOf;
using testing::Replace;
using testing::SumToml;
using testing::TempDir;
using testing::WriteTask;

TEST(TaskLoader, LoadsAValidTask) {
  TempDir tmp;
  auto dir = WriteTask(tmp.path(), "001_sum", SumToml());
  std::filesystem::create_directories(dir / "solutions");
  std::ofstream(dir / "solutions" / "b.cu") << "";
  std::ofstream(dir / "solutions" / "a.cu") << "";
  std::ofstream(dir / "solutions" / "notes.txt") << "";
  auto t = LoadTask(dir);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->key, "001_sum");
  EXPECT_EQ(t->id, 1);
  EXPECT_EQ(t->name, "sum");
  EXPECT_EQ(t->title, "Sum over ranks");
  EXPECT_EQ(t->world_sizes, (std::vector<int>{2, 4, 8}));
  EXPECT_EQ(t->dtypes, (std::vector<Dtype>{Dtype::kF32, Dtype::kBF16}));
  EXPECT_EQ(t->params.at("root"), 0);
  ASSERT_EQ(t->inputs.size(), 1u);
  EXPECT_EQ(t->inputs[0].shape, (std::vector<std::string>{"N"}));
  EXPECT_EQ(t->inputs[0].init.kind, InitSpec::Kind::kNormal);
  ASSERT_EQ(t->outputs.size(), 1u);
  EXPECT_EQ(t->tolerance.at(Dtype::kBF16).atol, "0.02");
  ASSERT_EQ(t->check_sizes.size(), 2u);
  EXPECT_EQ(t->check_sizes[1].label, "odd");
  EXPECT_EQ(t->check_sizes[1].vars.at("N"), "1001");
  EXPECT_EQ(t->bench_sizes[0].vars.at("N"), "1Mi / elem");
  EXPECT_EQ(t->perf_busbw_factor, "2 * (W - 1) / W");
  EXPECT_FALSE(t->policy.nccl);
  EXPECT_EQ(t->reference, dir / "reference.cu");
  ASSERT_EQ(t->solutions.size(), 2u);
  EXPECT_EQ(t->solutions[0].filename(), "a.cu");
  EXPECT_EQ(t->solutions[1].filename(), "b.cu");
}

TEST(TaskLoader, AcceptsNumbersAsExpressionsAndOptionalFields) {
  TempDir tmp;
  std::string toml = Replace(SumToml(), R"(shape = ["N"]
init)",
                             R"(shape = [2, "N"]
same_on_all_ranks = true
init)");
  toml = Replace(toml, R"(init = { kind = "normal", mean = 0.0, std = 1.0 })",
                 R"(init = { kind = "int", low = "-W", high = 9 })");
  toml = Replace(toml, "[policy]\nnccl = false",
                 "[policy]\nnccl = true\ncublas = true\ncufft = true\nworkspace_x = 1");
  toml = Replace(toml, "workspace_x = 1", "");
  toml += "\n";
  auto t = LoadTask(WriteTask(tmp.path(), "001_sum",
                              Replace(toml, "[params]", "workspace = \"4Mi\"\n\n[params]")));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->inputs[0].shape, (std::vector<std::string>{"2", "N"}));
  EXPECT_TRUE(t->inputs[0].same_on_all_ranks);
  EXPECT_EQ(t->inputs[0].init.kind, InitSpec::Kind::kInt);
  EXPECT_EQ(t->inputs[0].init.int_low, "-W");
  EXPECT_EQ(t->inputs[0].init.int_high, "9");
  EXPECT_TRUE(t->policy.nccl);
  EXPECT_TRUE(t->policy.cublas);
  EXPECT_TRUE(t->policy.cufft);
  EXPECT_FALSE(t->policy.cudnn);
  EXPECT_EQ(t->workspace, "4Mi");
}

// One broken variant of the fixture: the error must name the file, the line
// of `line_of` in the broken text, the field, and say what is wrong.
struct BadCase {
  const char* what;
  const char* from;
  const char* to;
  const char* line_of;  // nullptr: line 1
  const char* field;
  const char* message;
};

class TaskLoaderErrors : public ::testing::TestWithParam<BadCase> {};

TEST_P(TaskLoaderErrors, NameFileLineAndField) {
  const BadCase& c = GetParam();
  TempDir tmp;
  const std::string toml = Replace(SumToml(), c.from, c.to);
  auto dir = WriteTask(tmp.path(), "001_sum", toml);
  auto t = LoadTask(dir);
  ASSERT_FALSE(t.ok()) << c.what;
  EXPECT_EQ(t.status().kind(), ErrorKind::kInvalidInput);
  const int line = c.line_of ? LineOf(toml, c.line_of) : 1;
  ASSERT_GT(line, 0) << "fixture bug in " << c.what;
  const std::string prefix =
      (dir / "task.toml").string() + ":" + std::to_string(line) + ": " + c.field + ": ";
  EXPECT_EQ(t.status().message().rfind(prefix, 0), 0u)
      << c.what << "\n  got: " << t.status().message() << "\n  want prefix: " << prefix;
  EXPECT_NE(t.status().message().find(c.message), std::string::npos)
      << c.what << "\n  got: " << t.status().message() << "\n  want: " << c.message;
}

const BadCase kBadCases[] = {
    {"unknown dtype", "dtype = \"T\"\nshape", "dtype = \"bf17\"\nshape", "bf17", "inputs[0].dtype",
     "unknown dtype 'bf17' (expected one of f64, f32, f16, bf16, fp8_e4m3, fp8_e5m2, i64, i32, i8, "
     "u8, bool)"},
    {"unknown dtype in dtypes", R"(dtypes = ["f32", "bf16"])", R"(dtypes = ["f32", "f31"])",
     "dtypes", "dtypes[1]", "unknown dtype 'f31'"},
    {"unknown top-level key", "world_sizes = [2, 4, 8]",
     "world_sizes = [2, 4, 8]\nwrold_sizes = [2]", "wrold", "wrold_sizes", "unknown field"},
    {"id does not match the folder", "id = 1", "id = 2", "id = 2", "id",
     "2 does not match the folder prefix"},
    {"id not an integer", "id = 1", "id = \"1\"", "id = ", "id",
     "expected an integer, found string"},
    {"name does not match the folder", "name = \"sum\"", "name = \"summ\"", "summ", "name",
     "'summ' does not match the folder name '001_sum'"},
    {"name with capitals", "name = \"sum\"", "name = \"Sum\"", "name = \"Sum\"", "name",
     "[a-z0-9_]"},
    {"missing title", "title = \"Sum over ranks\"\n", "", nullptr, "title",
     "required field is missing"},
    {"title of the wrong type", "title = \"Sum over ranks\"", "title = 3", "title", "title",
     "expected a string, found integer"},
    {"world size out of range", "world_sizes = [2, 4, 8]", "world_sizes = [2, 17]", "world_sizes",
     "world_sizes[1]", "17 is out of range (1..16)"},
    {"world sizes empty", "world_sizes = [2, 4, 8]", "world_sizes = []", "world_sizes",
     "world_sizes", "must not be empty"},
    {"world size twice", "world_sizes = [2, 4, 8]", "world_sizes = [2, 2]", "world_sizes",
     "world_sizes[1]", "listed twice"},
    {"unknown init kind", "kind = \"normal\"", "kind = \"gaussian\"", "gaussian",
     "inputs[0].init.kind", "unknown init kind 'gaussian'"},
    {"unknown init field", "mean = 0.0, std = 1.0", "mean = 0.0, stdev = 1.0", "stdev",
     "inputs[0].init.stdev",
     "unknown field (expected one of: kind, mean, std, pieces, column_std, distinct)"},
    {"negative std", "std = 1.0", "std = -1.0", "std = -1.0", "inputs[0].init.std", "must be >= 0"},
    {"piece without until", "mean = 0.0, std = 1.0", "pieces = [{ std = 1.0 }, { std = 2.0 }]",
     "pieces", "inputs[0].init.pieces[0].until", "required on every piece but the last"},
    {"last piece with until", "mean = 0.0, std = 1.0", "pieces = [{ until = \"N\", std = 1.0 }]",
     "pieces", "inputs[0].init.pieces[0].until", "leave out its until"},
    {"negative piece std", "mean = 0.0, std = 1.0",
     "pieces = [{ until = \"N / 2\" }, { std = -2.0 }]", "pieces", "inputs[0].init.pieces[1].std",
     "must be >= 0"},
    {"std of an unknown variable", "std = 1.0", "std = \"1 / sqrt(Q)\"", "tiny", "sizes.check[0]",
     "does not bind 'Q', which inputs[0].init.std ('1 / sqrt(Q)'"},
    {"uniform low >= high", R"(init = { kind = "normal", mean = 0.0, std = 1.0 })",
     R"(init = { kind = "uniform", low = 1.0, high = 1.0 })", "uniform", "inputs[0].init",
     "needs low < high"},
    {"empty shape", "shape = [\"N\"]\ninit", "shape = []\ninit", "shape = []", "inputs[0].shape",
     "must not be empty"},
    {"bad shape expression", "shape = [\"N\"]\ninit", "shape = [\"N*\"]\ninit", "N*",
     "inputs[0].shape[0]", "unexpected end of expression 'N*'"},
    {"shape of the wrong type", "shape = [\"N\"]\ninit", "shape = [true]\ninit", "shape = [true]",
     "inputs[0].shape[0]", "expected an expression (string or number), found boolean"},
    {"duplicate tensor name", "name = \"y\"", "name = \"x\"",
     "name = \"x\"\ndtype = \"T\"\nshape = [\"N\"]\n\n[tol", "outputs[0].name",
     "tensor name 'x' is used twice"},
    {"unknown field on an output", "name = \"y\"", "name = \"y\"\ninit = { kind = \"normal\" }",
     "init = { kind = \"normal\" }", "outputs[0].init",
     "unknown field (expected one of: name, dtype, shape, ranks, tolerance, rank_symmetric, "
     "count)"},
    {"missing tolerance for a dtype", "bf16 = { atol = 2e-2, rtol = 2e-2 }\n", "", "[[outputs]]",
     "outputs[0].tolerance", "output 'y' can be bf16 but there is no tolerance for it"},
    {"tolerance for an unknown dtype", "bf16 = { atol", "bf61 = { atol", "bf61", "tolerance.bf61",
     "unknown dtype 'bf61'"},
    {"tolerance with an unknown field", "f32 = { atol = 1e-5, rtol = 1e-5 }",
     "f32 = { atol = 1e-5, rel = 1e-5 }", "rel =", "tolerance.f32.rel",
     "unknown field (expected one of: atol, rtol, rms)"},
    {"negative tolerance", "f32 = { atol = 1e-5", "f32 = { atol = -1e-5", "f32 = {",
     "tolerance.f32", "atol, rtol and rms must be >= 0"},
    {"size does not bind a variable", R"({ label = "tiny", N = "8" })",
     R"({ label = "tiny", M = "8" })", "tiny", "sizes.check[0]",
     "size 'tiny' does not bind 'N', which inputs[0].shape[0] ('N', line 16) uses"},
    {"size binds W", R"({ label = "tiny", N = "8" })", R"({ label = "tiny", N = "8", W = "2" })",
     "tiny", "sizes.check[0].W", "other than W, elem, rank and the params"},
    {"size binds rank", R"({ label = "tiny", N = "8" })",
     R"({ label = "tiny", N = "8", rank = "2" })", "tiny", "sizes.check[0].rank",
     "other than W, elem, rank and the params"},
    {"size without a label", R"({ label = "tiny", N = "8" })", R"({ N = "8" })",
     "check =", "sizes.check[0].label", "required field is missing"},
    {"duplicate size label", R"(label = "odd")", R"(label = "tiny")",
     "check =", "sizes.check[1].label", "'tiny' is used twice"},
    {"unknown sizes list", "bench = [", "bnech = [", "bnech", "sizes.bnech", "unknown field"},
    {"perf formula with an unknown function", "bytes = \"N * elem\"", "bytes = \"log(N) * elem\"",
     "log", "perf.bytes", "unknown function 'log'"},
    {"perf formula reads an unbound variable", "bytes = \"N * elem\"", "bytes = \"K * elem\"",
     "tiny", "sizes.check[0]", "does not bind 'K', which perf.bytes"},
    {"policy typo", "nccl = false", "ncl = false", "ncl", "policy.ncl", "unknown field"},
    {"policy of the wrong type", "nccl = false", "nccl = \"no\"", "nccl", "policy.nccl",
     "expected true or false, found string"},
    {"output ranks reads an unbound variable", "name = \"y\"", "name = \"y\"\nranks = \"dst\"",
     "tiny", "sizes.check[0]", "does not bind 'dst', which outputs[0].ranks"},
    {"param named W", "root = 0", "W = 2", "W = 2", "params.W", "other than W, elem and rank"},
    {"rank outside a shape", "bytes = \"N * elem\"", "bytes = \"N * elem * rank\"", "tiny",
     "sizes.check[0]", "does not bind 'rank', which perf.bytes"},
    {"group without a size", "[[inputs]]", "[[groups]]\nname = \"tp\"\n\n[[inputs]]", "[[groups]]",
     "groups[0].size", "required field is missing"},
    {"group with an unknown layout", "[[inputs]]",
     "[[groups]]\nname = \"tp\"\nsize = 2\nlayout = \"ring\"\n\n[[inputs]]", "layout",
     "groups[0].layout", "'ring' is not a layout (contiguous or strided)"},
    {"group name twice", "[[inputs]]",
     "[[groups]]\nname = \"tp\"\nsize = 2\n\n[[groups]]\nname = \"tp\"  # again\nsize = "
     "1\n\n[[inputs]]",
     "# again", "groups[1].name", "group name 'tp' is used twice"},
    {"group with an unknown field", "[[inputs]]",
     "[[groups]]\nname = \"tp\"\nsize = 2\nstride = 2\n\n[[inputs]]", "stride", "groups[0].stride",
     "unknown field (expected one of: name, size, layout)"},
    {"shard over an unknown group", "init = {", "shard = { dim = 0, group = \"dp\" }\ninit = {",
     "shard", "inputs[0].shard.group", "'dp' is not one of the task's [[groups]]"},
    {"shard of a missing dimension", "init = {", "shard = { dim = 1 }\ninit = {", "shard",
     "inputs[0].shard.dim", "1 is not a dimension of the shape"},
    {"shard and replicated", "init = {", "shard = { dim = 0 }\nreplicated = true\ninit = {",
     "shard", "inputs[0].shard", "either replicated or sharded, not both"},
    {"tolerance on an input that is not inout", "init = {", "tolerance = { atol = 1.0 }\ninit = {",
     "tolerance = {", "inputs[0].tolerance", "only an inout input is checked"},
    {"rank_symmetric on an input that is not inout", "init = {", "rank_symmetric = true\ninit = {",
     "rank_symmetric", "inputs[0].rank_symmetric", "only an output or an inout input is checked"},
    {"rank_symmetric that is not a boolean", "[[outputs]]\nname = \"y\"",
     "[[outputs]]\nname = \"y\"\nrank_symmetric = \"yes\"", "rank_symmetric",
     "outputs[0].rank_symmetric", "expected true or false, found string"},
    {"floor with an unknown field", "[policy]", "[floor]\nbytes = \"N\"\n\n[policy]",
     "bytes = \"N\"", "floor.bytes",
     "unknown field (expected one of: hbm_bytes, link_bytes, flops, sync_rounds)"},
    {"floor's sync rounds read an unbound variable", "[policy]",
     "[floor]\nsync_rounds = \"R\"\n\n[policy]", "tiny", "sizes.check[0]",
     "does not bind 'R', which floor.sync_rounds"},
    {"expert that is not a table", "id = 1\n", "id = 1\nexpert = \"oneshot.cu\"\n",
     "expert =", "expert", "expected a table, found string"},
    {"expert with neither kernel nor none", "[policy]",
     "[expert]\ntechnique = \"one-shot\"\n\n[policy]", "[expert]", "expert", "needs kernel = "},
    {"expert kernel without its technique", "[policy]",
     "[expert]\nkernel = \"reference.cu\"\n\n[policy]", "[expert]", "expert.technique",
     "say which public technique"},
    {"expert kernel outside the task folder", "[policy]",
     "[expert]\nkernel = \"../002_x/oneshot.cu\"\ntechnique = \"t\"\n\n[policy]",
     "kernel =", "expert.kernel", "must be a .cu file inside the task folder"},
    {"expert kernel that is missing", "[policy]",
     "[expert]\nkernel = \"solutions/oneshot.cu\"\ntechnique = \"t\"\n\n[policy]",
     "kernel =", "expert.kernel", "solutions/oneshot.cu does not exist"},
    {"expert kernel and none at once", "[policy]",
     "[expert]\nkernel = \"reference.cu\"\nnone = \"nothing beats NCCL\"\n\n[policy]",
     "kernel =", "expert.kernel", "exclude each other"},
    {"expert with an unknown field", "[policy]", "[expert]\nfile = \"x.cu\"\n\n[policy]",
     "file =", "expert.file", "unknown field (expected one of: kernel, technique, none)"},
    {"floor reads an unbound variable", "[policy]", "[floor]\nflops = \"2 * K\"\n\n[policy]",
     "tiny", "sizes.check[0]", "does not bind 'K', which floor.flops"},
    {"param not a number", "root = 0", "root = \"zero\"", "root", "params.root",
     "expected a number, found string"},
    {"count names no output", "[[outputs]]\nname = \"y\"",
     "[[outputs]]\nname = \"y\"\ncount = \"n\"", "count = ", "outputs[0].count",
     "'n' is not one of the task's outputs"},
    {"count of a float dtype", "[[outputs]]\nname = \"y\"",
     "[[outputs]]\nname = \"n\"\ndtype = \"T\"\nshape = [\"1\"]\n\n"
     "[[outputs]]\nname = \"y\"\ncount = \"n\"",
     "count = ", "outputs[1].count", "the count 'n' must have dtype i32 or i64, not T"},
    {"count of more than one number", "[[outputs]]\nname = \"y\"",
     "[[outputs]]\nname = \"n\"\ndtype = \"i64\"\nshape = [\"W\"]\n\n"
     "[[outputs]]\nname = \"y\"\ncount = \"n\"",
     "count = ", "outputs[1].count", "the count 'n' must have shape [\"1\"]"},
    {"an output counting itself", "[[outputs]]\nname = \"y\"",
     "[[outputs]]\nname = \"y\"\ncount = \"y\"", "count = ", "outputs[0].count",
     "an output cannot count its own rows"},
    {"count not a string", "[[outputs]]\nname = \"y\"", "[[outputs]]\nname = \"y\"\ncount = 3",
     "count = 3", "outputs[0].count", "expected a string, found integer"},
};

INSTANTIATE_TEST_SUITE_P(All, TaskLoaderErrors, ::testing::ValuesIn(kBadCases));

TEST(TaskLoader, InputRejectsOutputFields) {
  TempDir tmp;
  const std::string toml = Replace(SumToml(), "init = {", "ranks = \"0\"\ninit = {");
  auto t = LoadTask(WriteTask(tmp.path(), "001_sum", toml));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(":" + std::to_string(LineOf(toml, "ranks = ")) +
                                      ": inputs[0].ranks: unknown field"),
            std::string::npos)
      << t.status().message();
}

TEST(TaskLoader, InoutInputNeedsATolerance) {
  TempDir tmp;
  std::string toml = Replace(SumToml(), "init = {", "inout = true\ninit = {");
  toml = Replace(toml, "shape = [\"N\"]\n\n[tol",
                 "shape = [\"N\"]\ntolerance = { atol = 1e-3 }\n\n[tol");
  toml = Replace(toml, "f32 = { atol = 1e-5, rtol = 1e-5 }\n", "");
  auto t = LoadTask(WriteTask(tmp.path(), "001_sum", toml));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(":" + std::to_string(LineOf(toml, "[[inputs]]")) +
                                      ": inputs[0].tolerance: inout input 'x' can be f32 but "
                                      "there is no tolerance for it"),
            std::string::npos)
      << t.status().message();
}

TEST(TaskLoader, AnInoutInputMayBeTheOnlyResult) {
  TempDir tmp;
  // No [[outputs]] at all: refused unless an input is updated in place.
  std::string toml = SumToml();
  const size_t out = toml.find("[[outputs]]"), tol = toml.find("[tolerance]");
  toml.erase(out, tol - out);
  auto refused = LoadTask(WriteTask(tmp.path(), "001_sum", toml));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("a task needs at least one [[outputs]] (or an inout "
                                            "input)"),
            std::string::npos)
      << refused.status().message();
  TempDir tmp2;
  Task t = testing::LoadOrDie(tmp2.path(), "001_sum",
                              Replace(toml, "init = {", "inout = true\ninit = {"));
  auto p = Instantiate(t, 2, Dtype::kF32, t.check_sizes[0], true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->KernelOutputCount(), 0);
  ASSERT_EQ(p->outputs.size(), 1u);  // the in-place x, checked after every call
  EXPECT_EQ(p->outputs[0].inout_of, 0);
  EXPECT_FALSE(p->outputs[0].rank_symmetric);
  // Declared on the inout input, it reaches the output that checks it.
  TempDir tmp3;
  Task s = testing::LoadOrDie(
      tmp3.path(), "001_sum",
      Replace(toml, "init = {", "inout = true\nrank_symmetric = true\ninit = {"));
  auto q = Instantiate(s, 2, Dtype::kF32, s.check_sizes[0], true);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_TRUE(q->outputs[0].rank_symmetric);
}

TEST(TaskLoader, TomlSyntaxErrorNamesFileAndLine) {
  TempDir tmp;
  const std::string toml =
      Replace(SumToml(), "category = \"collective\"", "category = \"collective");
  auto dir = WriteTask(tmp.path(), "001_sum", toml);
  auto t = LoadTask(dir);
  ASSERT_FALSE(t.ok());
  const std::string prefix =
      (dir / "task.toml").string() + ":" + std::to_string(LineOf(toml, "category")) + ":";
  EXPECT_EQ(t.status().message().rfind(prefix, 0), 0u) << t.status().message();
  EXPECT_NE(t.status().message().find("TOML syntax error"), std::string::npos);
}

TEST(TaskLoader, ExpertIsAKernelInTheFolderWithItsTechniqueOrAReasonForNone) {
  TempDir tmp;
  Task none = testing::LoadOrDie(tmp.path(), "001_sum", SumToml());
  EXPECT_FALSE(none.expert.has_value());  // not stated
  const std::string with = Replace(
      SumToml(), "[policy]",
      "[expert]\nkernel = \"solutions/oneshot.cu\"\ntechnique = \"one-shot push\"\n\n[policy]");
  const auto dir = WriteTask(tmp.path(), "002_sum", Replace(with, "id = 1", "id = 2"));
  std::filesystem::create_directories(dir / "solutions");
  std::ofstream(dir / "solutions" / "oneshot.cu") << "// expert\n";
  auto t = LoadTask(dir);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE(t->expert.has_value());
  EXPECT_EQ(t->expert->kernel, dir / "solutions" / "oneshot.cu");
  EXPECT_EQ(t->expert->technique, "one-shot push");
  EXPECT_TRUE(t->expert->none.empty());
  Task reason = testing::LoadOrDie(
      tmp.path(), "003_sum",
      Replace(Replace(SumToml(), "id = 1", "id = 3"), "[policy]",
              "[expert]\nnone = \"no public kernel beats NCCL here\"\n\n[policy]"));
  ASSERT_TRUE(reason.expert.has_value());
  EXPECT_TRUE(reason.expert->kernel.empty());
  EXPECT_EQ(reason.expert->none, "no public kernel beats NCCL here");
}

TEST(TaskLoader, SyncRoundsOfTheFloorAreInstantiated) {
  TempDir tmp;
  Task t = testing::LoadOrDie(
      tmp.path(), "001_sum",
      Replace(SumToml(), "[policy]", "[floor]\nsync_rounds = \"2 * (W - 1)\"\n\n[policy]"));
  auto p = Instantiate(t, 4, Dtype::kF32, t.check_sizes[0], true);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_DOUBLE_EQ(p->floor_sync_rounds, 6);
  EXPECT_DOUBLE_EQ(p->floor_hbm_bytes, 0);
}

TEST(TaskLoader, MissingReferenceIsAnError) {
  TempDir tmp;
  auto dir = WriteTask(tmp.path(), "001_sum", SumToml(), /*with_reference=*/false);
  auto t = LoadTask(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find((dir / "reference.cu").string() + ": missing"),
            std::string::npos)
      << t.status().message();
}

TEST(TaskLoader, FolderMustBeNamedLikeATask) {
  TempDir tmp;
  auto t = LoadTask(WriteTask(tmp.path(), "sum", SumToml()));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find(":1: id: the task folder 'sum' is not named <NNN>_<name>"),
            std::string::npos)
      << t.status().message();
}

TEST(TaskLoader, MissingFileIsNotFound) {
  TempDir tmp;
  auto t = LoadTask(tmp.path() / "001_sum");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().kind(), ErrorKind::kNotFound);
}

std::string Renamed(int id, const std::string& name) {
  std::string toml = Replace(SumToml(), "id = 1", "id = " + std::to_string(id));
  return Replace(toml, "name = \"sum\"", "name = \"" + name + "\"");
}

TEST(TaskLoader, LoadTasksSortsSkipsNonTaskFoldersAndFinds) {
  TempDir tmp;
  WriteTask(tmp.path(), "010_gather", Renamed(10, "gather"));
  WriteTask(tmp.path(), "002_scatter", Renamed(2, "scatter"));
  std::filesystem::create_directories(tmp.path() / "common");
  std::ofstream(tmp.path() / "README.md") << "not a task";
  auto tasks = LoadTasks(tmp.path());
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  ASSERT_EQ(tasks->size(), 2u);
  EXPECT_EQ((*tasks)[0].key, "002_scatter");
  EXPECT_EQ((*tasks)[1].key, "010_gather");
  EXPECT_EQ(FindTask(*tasks, "010_gather"), &(*tasks)[1]);
  EXPECT_EQ(FindTask(*tasks, "10"), &(*tasks)[1]);
  EXPECT_EQ(FindTask(*tasks, "002"), &(*tasks)[0]);
  EXPECT_EQ(FindTask(*tasks, "scatter"), &(*tasks)[0]);
  EXPECT_EQ(FindTask(*tasks, "3"), nullptr);
  EXPECT_EQ(FindTask(*tasks, "reduce"), nullptr);
}

TEST(TaskLoader, LoadTasksRejectsDuplicateIdsAndBadTasks) {
  TempDir tmp;
  WriteTask(tmp.path(), "002_scatter", Renamed(2, "scatter"));
  WriteTask(tmp.path(), "02_gather", Renamed(2, "gather"));
  auto tasks = LoadTasks(tmp.path());
  ASSERT_FALSE(tasks.ok());
  EXPECT_NE(tasks.status().message().find("id 2 is already used by"), std::string::npos)
      << tasks.status().message();

  TempDir tmp2;
  std::filesystem::create_directories(tmp2.path() / "003_half_written");
  auto half = LoadTasks(tmp2.path());
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("003_half_written/task.toml"), std::string::npos)
      << half.status().message();

  EXPECT_EQ(LoadTasks(tmp.path() / "nope").status().kind(), ErrorKind::kNotFound);
}

}  // namespace
}  // namespace kforge::eval
