// Files through the command: an output never destroys an input, inputs that are not regular files
// or are too short get a clear error instead of a hang, and numeric options refuse NaN and the
// values their defaults stand for.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "aqpim/gguf.h"
#include "support/cli.h"
#include "support/shared_data.h"
#include "support/temp_dir.h"

namespace aqpim {
namespace {

namespace fs = std::filesystem;
using test::run_cli;
using test::temp_path;

const std::string kStories = test::shared_dir() + "/models/stories260K";

void expect_error(const std::string& args, const std::string& message) {
    const auto r = run_cli(args);
    EXPECT_NE(r.exit_code, 0) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << args << "\n" << r.output;
}

TEST(CliFiles, OutputsNeverOverwriteInputs) {
    AQPIM_REQUIRE_SHARED("models/stories260K");
    const std::string model = temp_path("victim.gguf");
    fs::copy_file(kStories + "/stories260K.gguf", model, fs::copy_options::overwrite_existing);
    const auto size = fs::file_size(model);
    expect_error("run -m " + model + " -n 2 --kv pq --trace " + model, "--trace " + model + ": refusing to overwrite");
    expect_error("eval -m " + model + " -f " + model + " --kv f16 --plot " + model, "refusing to overwrite");
    EXPECT_EQ(fs::file_size(model), size);

    const std::string preset = temp_path("dram.json");
    fs::copy_file(fs::path(AQPIM_SOURCE_DIR) / "presets/dram/hbm3-5.2-attacc.json", preset,
                  fs::copy_options::overwrite_existing);
    const auto preset_size = fs::file_size(preset);
    expect_error("pimsim --dram " + preset + " --trace-commands " + preset, "--trace-commands " + preset + ": refusing");
    expect_error("pimsim --dram " + preset + " --plot " + preset, "--plot " + preset + ": refusing");
    EXPECT_EQ(fs::file_size(preset), preset_size);
}

TEST(CliFiles, TraceAppearsOnlyWhenTheRunCompletes) {
    AQPIM_REQUIRE_SHARED("models/stories260K");
    const std::string trace = temp_path("run.trace");
    const auto r = run_cli("run -m " + kStories + "/stories260K.gguf -n 4 --kv pq --trace " + trace);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::ifstream f(trace);
    std::string header;
    std::getline(f, header);
    EXPECT_NE(header.find("aqpim-kv-trace"), std::string::npos) << header;
    EXPECT_EQ(test::files_left_beside(trace), 0);
}

TEST(CliFiles, InputsThatAreNotRegularFilesOrTooShort) {
    AQPIM_REQUIRE_SHARED("models/stories260K");
    const std::string fifo = temp_path("model_fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    expect_error("info -m " + fifo, "not a regular file or a directory");  // opening it would block
    const std::string tiny = temp_path("three_bytes.gguf");
    std::ofstream(tiny) << "GGU";
    expect_error("info -m " + tiny, "3 bytes, too short");
    const std::string dir = temp_path("tok_dir");
    fs::create_directories(dir);
    expect_error("run -m " + kStories + "/stories260K.bin --tokenizer " + dir + " -n 1", "no such file");
    expect_error("ppl -m " + kStories + "/stories260K.gguf -f " + dir, "-f " + dir + ": is a directory");
}

TEST(CliFiles, LlamaCppVocabularyForALlama2cCheckpoint) {
    AQPIM_REQUIRE_SHARED("models/stories260K");
    // --tokenizer takes any vocabulary file, not only tokenizer.bin: here the GGUF of the same model
    const auto bin = run_cli("run -m " + kStories + "/stories260K.bin -p Once -n 8 --temp 0");
    const auto gguf = run_cli("run -m " + kStories + "/stories260K.bin --tokenizer " + kStories +
                              "/stories260K.gguf -p Once -n 8 --temp 0");
    ASSERT_EQ(bin.exit_code, 0) << bin.output;
    ASSERT_EQ(gguf.exit_code, 0) << gguf.output;
    EXPECT_EQ(bin.output.substr(0, bin.output.find('\n')), gguf.output.substr(0, gguf.output.find('\n')));
}

/// The token count `ppl` reports for the text ("FILE (part K/N): T tokens, ...").
long reported_tokens(const std::string& output) {
    const std::size_t part = output.find(" (part "), at = output.find("): ", part);
    return part == std::string::npos || at == std::string::npos ? -1 : std::stol(output.substr(at + 3));
}

TEST(CliFiles, TextPartsCutTheTextInTwoAtALineEnd) {
    const std::string gguf = kStories + "/stories260K.gguf", text = test::shared_dir() + "/text/tinystories-valid.txt";
    AQPIM_REQUIRE_SHARED("text/tinystories-valid.txt");
    const std::string base = "ppl -m " + gguf + " -f " + text + " -c 64 --chunks 1";
    const long whole = reported_tokens(run_cli(base).output), first = reported_tokens(run_cli(base + " --part 1/2").output),
               second = reported_tokens(run_cli(base + " --part 2/2").output);
    ASSERT_GT(first, 0);
    ASSERT_GT(second, 0);
    // Each part has its own BOS; a cut at a line end splits no token (a newline is a token of its own).
    EXPECT_NEAR(double(first + second - 1), double(whole), 2.0);
    EXPECT_NEAR(double(first), double(second), 0.1 * double(whole));
    expect_error(base + " --part 0/2", "--part 0/2: expected K/N");
    expect_error(base + " --part 2", "--part 2: expected K/N");
    expect_error("eval -m " + gguf + " --generate 4 --part 1/2", "--part");
}

TEST(CliFiles, NumericOptionsRefuseNanAndTheirDefaultsSentinels) {
    for (const std::string& opt : {"--eff-bw 0", "--eff-bw nan", "--eff-compute 0", "--launch-us -1", "--wbits 0"})
        expect_error("roofline --preset llama2-7b " + opt, opt.substr(0, opt.find(' ')));
    for (const std::string& opt : {"--weight-bytes nan", "--weight-bytes -1", "--pim-capacity 0", "--head-dim 1073741824",
                                   "--layers 0", "--context 0", "--devices 100000"})
        expect_error("pimsim " + opt, opt.substr(0, opt.find(' ')));
}

TEST(CliFiles, OptionsThatCannotApplyAreRefused) {
    AQPIM_REQUIRE_SHARED("text/tinystories-valid.txt");
    AQPIM_REQUIRE_SHARED("models/stories260K");
    const std::string gguf = kStories + "/stories260K.gguf";
    expect_error("info -m " + gguf + " --kv bogus", "unknown KV cache scheme 'bogus'");
    expect_error("info --kv f16", "give -m MODEL");
    expect_error("roofline --preset llama2-7b --pp 100", "--pp 100: more pipeline stages than the model's 32 layers");
    expect_error("roofline --preset llama2-7b --tp 1000", "--tp 1000");
    expect_error("run -m " + gguf + " --seed -1", "--seed: value -1 is not a whole number");
    expect_error("pimsim --kv-trace x --trace-step -3", "--trace-step");
    // an option of another mode would be ignored: refused instead
    expect_error("pimsim --trace-step 3", "--trace-step requires --kv-trace");
    expect_error("pimsim --pq-mapping subspace --placement buffer", "needs --placement bank");
    expect_error("eval -m " + gguf + " --generate 4 -f x", "--file excludes --generate");
    expect_error("eval -m " + gguf + " -f x --layer 2", "--layer requires --fidelity");
    expect_error("eval -m " + gguf + " -f x --window 5", "--window requires --generate");
    expect_error("bench decode -m " + gguf + " --batch 2", "--batch requires --contexts");
    expect_error("demo --synthetic -m " + gguf, "--model excludes --synthetic");
    // values no run can use
    expect_error("pimsim --devices 4096 --layers 32 --kv-heads 8", "more PIM devices than the 256 KV heads");
    expect_error("eval -m " + gguf + " -f " + test::shared_dir() + "/text/tinystories-valid.txt -c 64 --fidelity "
                 "--bins 100 --kv pq:m=4,calib=32,page=32",
                 "100 position bins for the 64 positions");
    // an output that cannot be written fails before the benchmark starts
    expect_error("bench pq --sections scan -o /nonexistent_dir/x.json", "-o /nonexistent_dir/x.json");
    // a trace of a cache that is not PQ says how to record one pimsim can replay
    const std::string trace = temp_path("f16.trace");
    ASSERT_EQ(run_cli("run -m " + gguf + " -n 3 --trace " + trace).exit_code, 0);
    expect_error("pimsim --kv-trace " + trace, "recorded with the 'f16' cache");
}

TEST(CliFiles, AnOutputLargerThanTheFreeSpaceFailsFirst) {
    // A file larger than the free space fails before writing, not when the disk is full.
    const std::string huge = temp_path("huge.gguf");
    expect_error("synth --shape custom --hidden 131072 --ffn 524288 --heads 128 --kv-heads 8 --layers 1024 "
                 "--vocab 4000000 --type f16 -o " + huge,
                 "GiB free");
    EXPECT_EQ(test::files_left_beside(huge), 0);
}

TEST(CliFiles, AnInterruptedWriteLeavesNothing) {
    // SIGINT or SIGTERM in the middle of a 3.8 GB write: the temporary file goes with the process.
    const std::string out = temp_path("interrupted.gguf");
    if (fs::space(fs::path(out).parent_path()).available < (std::uintmax_t(8) << 30))
        GTEST_SKIP() << "skipped: the 3.8 GB write this interrupts needs 8 GB free in " << fs::path(out).parent_path();
    for (const char* sig : {"INT", "TERM"}) {
        const std::string cmd = std::string("timeout -s ") + sig + " 0.5 " + AQPIM_CLI_PATH +
                                " synth --shape llama2-7b --type q4_0 -o " + out + " >/dev/null 2>&1";
        const int status = std::system(cmd.c_str());
        EXPECT_EQ(WEXITSTATUS(status), 124) << sig << ": the write ended before the signal, so nothing was interrupted";
        EXPECT_FALSE(fs::exists(out)) << sig;
        EXPECT_EQ(test::files_left_beside(out), 0) << sig;
    }
}

TEST(CliFiles, NonFiniteWeightsAreAnErrorNotANumber) {
    AQPIM_REQUIRE_SHARED("models/austen-13m/austen-13m-f16.gguf");
    AQPIM_REQUIRE_SHARED("text/northanger-abbey.txt");
    // A Q8_0 block scale of NaN (a hostile or broken file) used to give "PPL = nan" with exit 0, a
    // plausible perplexity on AVX-512 (NaN scores weighed 0) and token 0 from the sampler.
    const std::string q8 = temp_path("austen_q8.gguf");
    ASSERT_EQ(run_cli("convert -m " + test::shared_dir() + "/models/austen-13m/austen-13m-f16.gguf --type q8_0 -o " + q8)
                  .exit_code,
              0);
    std::string bytes;
    {
        const GgufFile g(q8);
        const GgufTensorInfo& t = g.tensor("blk.0.attn_k.weight");
        ASSERT_EQ(t.type, GgmlType::Q8_0);
        const std::string head(reinterpret_cast<const char*>(g.tensor_data(t)), 64);
        std::ifstream in(q8, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
        const std::size_t at = bytes.find(head);
        ASSERT_NE(at, std::string::npos);
        bytes[at] = char(0x00);  // the block's f16 scale: 0x7E00 is a NaN
        bytes[at + 1] = char(0x7E);
    }
    std::ofstream(q8, std::ios::binary | std::ios::trunc) << bytes;
    const std::string text = test::shared_dir() + "/text/northanger-abbey.txt";
    for (const std::string simd : {"ref", "avx2", "avx512"}) {
        const auto r = run_cli("--simd " + simd + " ppl -m " + q8 + " -f " + text + " -c 128 --chunks 1");
        if (r.output.find("this CPU cannot run " + simd) != std::string::npos) continue;  // a level the CPU lacks
        EXPECT_NE(r.exit_code, 0) << simd << "\n" << r.output;
        EXPECT_NE(r.output.find("not finite"), std::string::npos) << simd << "\n" << r.output;
    }
    expect_error("run -m " + q8 + " -p Once -n 3", "hold non-finite values");
}

}  // namespace
}  // namespace aqpim
