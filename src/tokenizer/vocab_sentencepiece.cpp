// SentencePiece tokenizer.model: a protobuf ModelProto, read with a small bounds-checked wire-format
// reader (no protobuf dependency). What is read:
//   ModelProto      1: pieces (repeated SentencePiece), 2: trainer_spec, 3: normalizer_spec
//   SentencePiece   1: piece (string), 2: score (float), 3: type (enum, default NORMAL = 1)
//   TrainerSpec     3: model_type (1 UNIGRAM (default), 2 BPE, 3 WORD, 4 CHAR),
//                   40: unk_id (0), 41: bos_id (1), 42: eos_id (2), 43: pad_id (-1)
//   NormalizerSpec  1: name, 3: add_dummy_prefix (default true)
// Only BPE models are supported (their encoder is the score-driven merge of VocabKind::spm). Like
// llama.cpp, the normalizer's character map and remove_extra_whitespaces are not applied. A
// tokenizer_config.json beside the file is applied as llama.cpp's converter does (add_bos_token,
// add_eos_token, added_tokens_decoder), so the vocabulary equals the converted GGUF's.

#include <cstring>
#include <filesystem>

#include "aqpim/error.h"
#include "aqpim/file_io.h"
#include "aqpim/tokenizer.h"
#include "tokenizer/vocab_io.h"

namespace aqpim {

namespace {

/// Protobuf wire-format reader over [p, end); every read is checked against end.
class PbReader {
public:
    PbReader(const char* p, const char* end, const std::string& path, const char* what)
        : p_(p), end_(end), path_(path), what_(what) {}

    bool done() const { return p_ == end_; }

    std::uint64_t varint() {
        std::uint64_t v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            AQPIM_CHECK(p_ < end_, "{}: truncated varint in {}", path_, what_);
            const auto b = static_cast<std::uint8_t>(*p_++);
            v |= std::uint64_t(b & 0x7F) << shift;
            if ((b & 0x80) == 0) return v;
        }
        AQPIM_FAIL("{}: varint longer than 10 bytes in {}", path_, what_);
    }
    /// Next field: (field number, wire type).
    std::pair<std::uint32_t, std::uint32_t> tag() {
        const std::uint64_t t = varint();
        const auto field = std::uint32_t(t >> 3), wire = std::uint32_t(t & 7);
        AQPIM_CHECK(field != 0 && (t >> 3) <= 0x1FFFFFFF, "{}: bad field number in {}", path_, what_);
        return {field, wire};
    }
    /// A length-delimited field's bytes [begin, end).
    std::pair<const char*, const char*> bytes() {
        const std::uint64_t n = varint();
        AQPIM_CHECK(n <= std::uint64_t(end_ - p_), "{}: length {} runs past the end of {} ({} bytes left)", path_, n,
                    what_, end_ - p_);
        const char* b = p_;
        p_ += n;
        return {b, p_};
    }
    float fixed32_float() {
        AQPIM_CHECK(end_ - p_ >= 4, "{}: truncated fixed32 in {}", path_, what_);
        float f;
        std::memcpy(&f, p_, 4);
        p_ += 4;
        return f;
    }
    void skip(std::uint32_t wire) {
        switch (wire) {
            case 0: varint(); return;
            case 1:
                AQPIM_CHECK(end_ - p_ >= 8, "{}: truncated fixed64 in {}", path_, what_);
                p_ += 8;
                return;
            case 2: bytes(); return;
            case 5:
                AQPIM_CHECK(end_ - p_ >= 4, "{}: truncated fixed32 in {}", path_, what_);
                p_ += 4;
                return;
            default: AQPIM_FAIL("{}: unsupported protobuf wire type {} in {}", path_, wire, what_);
        }
    }
    void expect(std::uint32_t wire, std::uint32_t want, std::uint32_t field) {
        AQPIM_CHECK(wire == want, "{}: field {} of {} has wire type {} (expected {})", path_, field, what_, wire, want);
    }

private:
    const char* p_;
    const char* end_;
    const std::string& path_;
    const char* what_;
};

/// An int32 field as protobuf encodes it (negative values as 10-byte two's complement varints).
std::int64_t as_int32(std::uint64_t v) { return std::int64_t(std::int32_t(std::uint32_t(v))); }

}  // namespace

VocabData vocab_from_sentencepiece_model(const std::string& path) {
    const std::string file = read_whole_file(path, "tokenizer");
    VocabData v;
    v.kind = VocabKind::spm;
    std::int64_t model_type = 1, unk = 0, bos = 1, eos = 2, pad = -1;
    bool dummy_prefix = true;

    PbReader top(file.data(), file.data() + file.size(), path, "ModelProto");
    while (!top.done()) {
        const auto [field, wire] = top.tag();
        if (field == 1) {
            top.expect(wire, 2, field);
            const auto [b, e] = top.bytes();
            PbReader pr(b, e, path, "a SentencePiece");
            std::string piece;
            float score = 0.0f;
            std::int64_t type = 1;
            bool has_piece = false;
            while (!pr.done()) {
                const auto [f, w] = pr.tag();
                if (f == 1) {
                    pr.expect(w, 2, f);
                    const auto [pb, pe] = pr.bytes();
                    piece.assign(pb, pe);
                    has_piece = true;
                } else if (f == 2) {
                    pr.expect(w, 5, f);
                    score = pr.fixed32_float();
                } else if (f == 3) {
                    pr.expect(w, 0, f);
                    type = as_int32(pr.varint());
                } else {
                    pr.skip(w);
                }
            }
            const std::size_t id = v.tokens.size();
            AQPIM_CHECK(has_piece, "{}: piece {} has no text", path, id);
            AQPIM_CHECK(type >= 1 && type <= 6, "{}: piece {} '{}' has type {} (expected 1..6)", path, id, piece, type);
            AQPIM_CHECK(score == score, "{}: piece {} '{}' has a NaN score", path, id, piece);
            AQPIM_CHECK(id < (1u << 24), "{}: more than 2^24 pieces", path);
            v.tokens.push_back(std::move(piece));
            v.scores.push_back(score);
            v.types.push_back(TokenType(type));
        } else if (field == 2) {
            top.expect(wire, 2, field);
            const auto [b, e] = top.bytes();
            PbReader tr(b, e, path, "TrainerSpec");
            while (!tr.done()) {
                const auto [f, w] = tr.tag();
                std::int64_t* dst = f == 3 ? &model_type : f == 40 ? &unk : f == 41 ? &bos : f == 42 ? &eos
                                                                    : f == 43 ? &pad : nullptr;
                if (dst) {
                    tr.expect(w, 0, f);
                    *dst = as_int32(tr.varint());
                } else {
                    tr.skip(w);
                }
            }
        } else if (field == 3) {
            top.expect(wire, 2, field);
            const auto [b, e] = top.bytes();
            PbReader nr(b, e, path, "NormalizerSpec");
            while (!nr.done()) {
                const auto [f, w] = nr.tag();
                if (f == 3) {
                    nr.expect(w, 0, f);
                    dummy_prefix = nr.varint() != 0;
                } else {
                    nr.skip(w);
                }
            }
        } else {
            top.skip(wire);
        }
    }

    const auto n = std::int64_t(v.tokens.size());
    AQPIM_CHECK(n > 0, "{}: no pieces (not a SentencePiece model?)", path);
    static const char* kTypes[] = {"?", "UNIGRAM", "BPE", "WORD", "CHAR"};
    AQPIM_CHECK(model_type == 2, "{}: model type {} ({}) is not supported (only BPE)", path, model_type,
                model_type >= 1 && model_type <= 4 ? kTypes[model_type] : "unknown");
    for (const auto& [name, id] : {std::pair{"unk_id", unk}, std::pair{"bos_id", bos}, std::pair{"eos_id", eos},
                                   std::pair{"pad_id", pad}}) {
        AQPIM_CHECK(id == -1 || (id >= 0 && id < n), "{}: trainer_spec.{} = {} is outside [0, {})", path, name, id, n);
    }
    v.unk = std::int32_t(unk);
    v.bos = std::int32_t(bos);
    v.eos = std::int32_t(eos);
    v.pad = std::int32_t(pad);
    v.add_space_prefix = dummy_prefix;
    v.add_bos = v.bos >= 0;
    v.add_eos = false;
    if (const auto cfg = tok::read_config_beside(path)) {
        const std::string cfg_path = (std::filesystem::path(path).parent_path() / "tokenizer_config.json").string();
        tok::apply_config_flags(*cfg, cfg_path, v);
        tok::apply_added_tokens_decoder(*cfg, cfg_path, v);
    }
    AQPIM_CHECK(!v.add_bos || v.bos >= 0, "{}: BOS is to be added but there is no BOS token", path);
    AQPIM_CHECK(!v.add_eos || v.eos >= 0, "{}: EOS is to be added but there is no EOS token", path);
    return v;
}

}  // namespace aqpim
