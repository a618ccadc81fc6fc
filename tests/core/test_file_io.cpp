// Input files read whole, JSON with a bounded depth, output files that harm no input.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "support/temp_dir.h"

namespace aqpim {
namespace {

namespace fs = std::filesystem;
using test::temp_path;

std::string error_of(const auto& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string contents(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(ReadWholeFile, ReadsRegularFilesAndNamesWhatIsWrongOtherwise) {
    const std::string p = temp_path("whole.txt");
    write_file(p, std::string("ab\0cd", 5));
    EXPECT_EQ(read_whole_file(p, "-f"), std::string("ab\0cd", 5));
    EXPECT_NE(error_of([&] { read_whole_file(p, "-f", 4); }).find("5 bytes, larger than the 4"), std::string::npos);
    EXPECT_NE(error_of([&] { read_whole_file(temp_path("missing"), "-f"); }).find("no such file"), std::string::npos);
    const std::string dir = temp_path("a_dir");
    fs::create_directories(dir);
    EXPECT_NE(error_of([&] { read_whole_file(dir, "tokenizer"); }).find("tokenizer " + dir + ": is a directory"),
              std::string::npos);
    // a FIFO would block a reader that opened it
    const std::string fifo = temp_path("a_fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    EXPECT_NE(error_of([&] { read_whole_file(fifo, "-f"); }).find("not a regular file"), std::string::npos);
}

std::string nested_array(int depth) { return std::string(std::size_t(depth), '[') + std::string(std::size_t(depth), ']'); }

TEST(ParseJson, BoundsTheNestingDepth) {
    EXPECT_TRUE(parse_json(nested_array(kMaxJsonDepth), "x").is_array());
    EXPECT_NE(error_of([&] { parse_json(nested_array(kMaxJsonDepth + 1), "cfg.json"); })
                  .find("cfg.json: JSON nested deeper than 64 levels"),
              std::string::npos);
    // deep enough to overflow the stack of a recursive walk or dump
    EXPECT_NE(error_of([&] { parse_json<nlohmann::ordered_json>("{\"a\":" + nested_array(200000) + "}", "p"); })
                  .find("nested deeper"),
              std::string::npos);
    EXPECT_NE(error_of([&] { parse_json("{\"a\": 1", "cfg.json"); }).find("cfg.json: not valid JSON"), std::string::npos);
    // the library quotes the bad token; the message stays short
    EXPECT_LT(error_of([&] { parse_json("[" + std::string(100000, '1') + "]", "x"); }).size(), 400u);
}

TEST(ParseJson, ExcerptsAreShort) {
    std::string ones = "[1";
    for (int i = 0; i < 500; ++i) ones += ",1";
    const nlohmann::json big = parse_json(ones + "]", "x");
    const std::string e = json_excerpt(big);
    EXPECT_EQ(e.size(), 63u);
    EXPECT_EQ(e.substr(60), "...");
    EXPECT_EQ(json_excerpt(nlohmann::json(7)), "7");
}

TEST(CheckOutputNotInput, RefusesInputsTheirLinksAndFilesOfInputDirectories) {
    const std::string in = temp_path("input.bin"), other = temp_path("other.bin"), link = temp_path("link.bin");
    write_file(in, "model");
    write_file(other, "old output");
    fs::remove(link);
    fs::create_symlink(in, link);
    EXPECT_NO_THROW(check_output_not_input(temp_path("new.bin"), {in}, "-o"));
    EXPECT_NO_THROW(check_output_not_input(other, {in, "", temp_path("missing")}, "-o"));
    EXPECT_NE(error_of([&] { check_output_not_input(in, {"", in}, "--trace"); })
                  .find("--trace " + in + ": refusing to overwrite the input " + in),
              std::string::npos);
    EXPECT_NE(error_of([&] { check_output_not_input(link, {in}, "-o"); }).find("refusing"), std::string::npos);
    const std::string dir = temp_path("model_dir");
    fs::create_directories(dir);
    write_file(dir + "/config.json", "{}");
    EXPECT_NE(error_of([&] { check_output_not_input(dir + "/config.json", {dir}, "-o"); }).find("refusing"),
              std::string::npos);
    EXPECT_NE(error_of([&] { check_output_not_input(dir, {}, "-o"); }).find("is a directory"), std::string::npos);
    EXPECT_EQ(contents(in), "model");
}

TEST(OutputFile, AppearsOnlyWhenCommittedAndTouchesNoOtherFile) {
    const std::string out = temp_path("out.json");
    write_file(out, "previous");
    write_file(out + ".tmp", "a file that happens to have the temporary-looking name");
    {
        OutputFile f(out, "-o");
        f.stream() << "half";
        EXPECT_EQ(contents(out), "previous");  // not before commit
    }  // destroyed without commit: an error on the way
    EXPECT_EQ(contents(out), "previous");
    EXPECT_EQ(test::files_left_beside(out), 1);  // only out.json.tmp, untouched
    EXPECT_EQ(contents(out + ".tmp"), "a file that happens to have the temporary-looking name");

    write_output_file(out, "new", "-o");
    EXPECT_EQ(contents(out), "new");
    EXPECT_EQ(test::files_left_beside(out), 1);
    // the permissions of a new file of this user, not mkstemp's 0600
    const mode_t mask = ::umask(0);
    ::umask(mask);
    EXPECT_EQ(fs::status(out).permissions(), fs::perms(0666 & ~mask));

    // an existing file keeps its permissions
    ::chmod(out.c_str(), 0600);
    write_output_file(out, "private", "-o");
    EXPECT_EQ(fs::status(out).permissions(), fs::perms(0600));

    EXPECT_THROW(OutputFile(temp_path("no_such_dir/x.json"), "-o"), Error);
    EXPECT_THROW(OutputFile(temp_path(""), "-o"), Error);  // the test directory itself
}

TEST(OutputFile, WritesThroughSymlinksAndIntoSpecialFiles) {
    // a symlink stays a symlink; the file it names gets the bytes
    const std::string target = temp_path("target.json"), link = temp_path("link.json");
    write_file(target, "old");
    fs::remove(link);
    fs::create_symlink(target, link);
    write_output_file(link, "new", "--plot");
    EXPECT_TRUE(fs::is_symlink(fs::symlink_status(link)));
    EXPECT_EQ(contents(target), "new");
    EXPECT_EQ(test::files_left_beside(target), 0);
    // /dev/null (and /dev/stdout, a FIFO): written into, never replaced, even by root
    write_output_file("/dev/null", "discarded", "--plot");
    EXPECT_TRUE(fs::is_character_file("/dev/null"));
    const std::string fifo = temp_path("out_fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    std::string got;
    std::thread reader([&] { got = contents(fifo); });
    write_output_file(fifo, "through the pipe", "-o");
    reader.join();
    EXPECT_EQ(got, "through the pipe");
    EXPECT_TRUE(fs::is_fifo(fifo));
}

}  // namespace
}  // namespace aqpim
