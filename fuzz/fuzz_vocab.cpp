// Vocabulary files on their own (`--tokenizer FILE`): tokenizer.json (with tokenizer_config.json
// beside it), a SentencePiece .model, a llama2.c tokenizer.bin; then encode and decode of
// arbitrary bytes. Input: NAME[:N_VOCAB] SEP vocabulary SEP text [SEP tokenizer_config.json],
// NAME one of tokenizer.json, tokenizer.model, tokenizer.bin (else tokenizer.bin), N_VOCAB the
// model's vocabulary size (default 512). Seeds: scripts/fuzz.sh.
#include <array>

#include "aqpim/model.h"
#include "aqpim/tokenizer.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using namespace aqpim;
    const auto parts = fuzz::split_parts(data, size);
    const std::array<std::string_view, 3> names = {"tokenizer.json", "tokenizer.model", "tokenizer.bin"};
    const std::string_view head = fuzz::part(parts, 0);
    const std::string_view head_name = head.substr(0, head.find(':'));
    std::string name(names[2]);
    for (const auto n : names)
        if (head_name == n) name = n;
    // n_vocab: what a model would ask for (a llama2.c tokenizer.bin cannot say it itself).
    int n_vocab = 512;
    if (const auto colon = head.find(':'); colon != std::string_view::npos) {
        n_vocab = 0;
        for (const char c : head.substr(colon + 1))
            if (c >= '0' && c <= '9' && n_vocab < (1 << 20)) n_vocab = n_vocab * 10 + (c - '0');
    }
    fuzz::clear_scratch();
    const std::string vocab = fuzz::write_scratch(name, fuzz::part(parts, 1));
    if (parts.size() > 3) fuzz::write_scratch("tokenizer_config.json", parts[3]);
    const std::string_view text = fuzz::part(parts, 2);
    fuzz::expect_success_or_error([&] {
        const auto tok = load_tokenizer_file(vocab, n_vocab);
        const auto ids = tok->encode(text, true);
        (void)tok->decode(ids);
    });
    return 0;
}
