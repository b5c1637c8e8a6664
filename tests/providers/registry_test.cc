#include "kforge/providers/registry.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

#include "kforge/core/fs.h"

namespace kforge::providers {
namespace {

// Sets (or unsets, for nullopt) a variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) {
      setenv(name, value->c_str(), 1);
    } else {
      unsetenv(name);
    }
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(RegistryTest, UserRegistryUnderXdgConfigHomeIsReadAfterTheBuiltinOne) {
  auto dir = MakeTempDir("kforge-xdg");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(WriteFileAtomic(*dir / "kforge" / "models.toml", R"(
[providers.mybox]
wire = "openai_chat"
base_url = "http://127.0.0.1:9/v1"
key_required = false
[models."mybox:local-7b"]
price = { input = 0.01, output = 0.02 }
[models."openai:gpt-5.5"]
price = { input = 1.0, output = 2.0 }
)")
                  .ok());
  {
    ScopedEnv xdg("XDG_CONFIG_HOME", dir->string());
    EXPECT_EQ(UserRegistryPath(), *dir / "kforge" / "models.toml");
    auto r = LoadRegistry({});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_NE(r->FindProvider("mybox"), nullptr);
    ASSERT_NE(r->FindModel("mybox:local-7b"), nullptr);
    EXPECT_DOUBLE_EQ(*r->FindModel("openai:gpt-5.5")->input_per_mtok, 1.0);  // the user's price
    // Tests and callers that want only their files still get only those.
    auto bare = LoadRegistry({}, /*include_builtin=*/false);
    ASSERT_TRUE(bare.ok());
    EXPECT_EQ(bare->FindModel("mybox:local-7b"), nullptr);
  }
  {
    ScopedEnv xdg("XDG_CONFIG_HOME", std::nullopt);
    ScopedEnv home("HOME", "/home/someone");
    EXPECT_EQ(UserRegistryPath(),
              std::filesystem::path("/home/someone/.config/kforge/models.toml"));
  }
  {
    // A damaged user file is an error naming it, not silently skipped.
    ASSERT_TRUE(
        WriteFileAtomic(*dir / "kforge" / "models.toml", "[models.\"x:y\"\nprice = = 1\n").ok());
    ScopedEnv xdg("XDG_CONFIG_HOME", dir->string());
    auto r = LoadRegistry({});
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find("models.toml"), std::string::npos) << r.status().message();
  }
  std::filesystem::remove_all(*dir);
}

// google-genai: "Both GOOGLE_API_KEY and GEMINI_API_KEY are set. Using GOOGLE_API_KEY."
TEST(RegistryTest, GeminiPrefersGoogleApiKeyAndSaysSoWhenTheKeysDiffer) {
  auto r = LoadRegistry({});
  ASSERT_TRUE(r.ok());
  const ProviderInfo* gemini = r->FindProvider("gemini");
  ASSERT_NE(gemini, nullptr);
  {
    ScopedEnv g("GOOGLE_API_KEY", "google-key");
    ScopedEnv m("GEMINI_API_KEY", "gemini-key");
    std::string note;
    EXPECT_EQ(ProviderKeyFromEnvironment(*gemini, &note), "google-key");
    EXPECT_NE(note.find("GOOGLE_API_KEY and GEMINI_API_KEY are both set and differ; using "
                        "GOOGLE_API_KEY"),
              std::string::npos)
        << note;
  }
  {
    ScopedEnv g("GOOGLE_API_KEY", "same");
    ScopedEnv m("GEMINI_API_KEY", "same");
    std::string note;
    EXPECT_EQ(ProviderKeyFromEnvironment(*gemini, &note), "same");
    EXPECT_TRUE(note.empty()) << note;
  }
  {
    ScopedEnv g("GOOGLE_API_KEY", std::nullopt);
    ScopedEnv m("GEMINI_API_KEY", "gemini-key");
    EXPECT_EQ(ProviderKeyFromEnvironment(*gemini), "gemini-key");
  }
}

TEST(RegistryTest, BuiltinRegistryLoadsAndCoversTheDocumentedSpecs) {
  auto r = LoadRegistry({});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (const char* spec : {"openai:gpt-5.5", "anthropic:claude-opus-4-7",
                           "gemini:gemini-3-pro-preview", "together:zai-org/GLM-5.1"}) {
    const ModelInfo* m = r->FindModel(spec);
    ASSERT_NE(m, nullptr) << spec;
    EXPECT_TRUE(m->input_per_mtok.has_value()) << spec;
    EXPECT_NE(r->FindProvider(m->provider), nullptr) << spec;
  }
  EXPECT_EQ(r->FindModel("together:zai-org/GLM-5.1")->name, "zai-org/GLM-5.1");
  EXPECT_TRUE(r->FindModel("anthropic:claude-opus-4-7")->Rejects("temperature"));
}

TEST(RegistryTest, ParsesSpecs) {
  auto s = ParseModelSpec("compat:http://host:8000/v1/#Qwen/Qwen3-8B");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->provider, "compat");
  EXPECT_EQ(s->base_url, "http://host:8000/v1");
  EXPECT_EQ(s->model, "Qwen/Qwen3-8B");
  EXPECT_FALSE(ParseModelSpec("gpt-5").ok());
  EXPECT_FALSE(ParseModelSpec("compat:host:8000#m").ok());
  EXPECT_FALSE(ParseModelSpec("compat:http://host:8000/v1").ok());
}

TEST(RegistryTest, UserEntriesOverrideAndErrorsNameTheLine) {
  Registry r;
  ASSERT_TRUE(r.AddToml("[providers.box]\nwire = \"openai_chat\"\nbase_url = \"http://box/v1\"\n"
                        "[models.\"box:m\"]\nprice = { input = 1.0, output = 2.0 }\n",
                        "user.toml")
                  .ok());
  ASSERT_TRUE(
      r.AddToml("[models.\"box:m\"]\nprice = { input = 3.0, output = 4.0 }\n", "later.toml").ok());
  EXPECT_EQ(*r.FindModel("box:m")->input_per_mtok, 3.0);
  Status bad = r.AddToml("[models.\"box:x\"]\ncontext = 10\nreasoning = \"deep\"\n", "bad.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("bad.toml:3"), std::string::npos) << bad.message();
  EXPECT_NE(bad.message().find("reasoning"), std::string::npos);
  Status syntax = r.AddToml("[models\n", "syntax.toml");
  EXPECT_NE(syntax.message().find("syntax.toml:1"), std::string::npos) << syntax.message();
  Status param = r.AddToml("[models.\"box:y\"]\nrejects = [\"temprature\"]\n", "typo.toml");
  EXPECT_NE(param.message().find("temprature"), std::string::npos);
}

TEST(RegistryTest, CostAppliesEachTokenClassItsPrice) {
  ModelInfo m;
  m.input_per_mtok = 3.0;
  m.cached_input_per_mtok = 0.3;
  m.cache_write_per_mtok = 3.75;
  m.output_per_mtok = 15.0;
  Usage u{.input_tokens = 1'000'000,
          .cached_input_tokens = 200'000,
          .output_tokens = 100'000,
          .reasoning_tokens = 50'000,
          .cache_write_input_tokens = 300'000};
  // 500k plain * 3 + 200k * 0.3 + 300k * 3.75 + 100k * 15 (reasoning is inside output).
  EXPECT_NEAR(*CostUsd(m, u), 1.5 + 0.06 + 1.125 + 1.5, 1e-9);
  m.output_per_mtok.reset();
  EXPECT_FALSE(CostUsd(m, u).has_value());
}

}  // namespace
}  // namespace kforge::providers
