// host/data/bpe_tokenizer.cpp: byte-level BPE from an HF tokenizer.json: what the file says is read and checked
// here, the text is split by pretokenizer.cpp, and each piece is merged here.
//
// Note [Byte-level BPE]
// ~~~~~~~~~~~~~~~~~~~~~
// GPT-2 (and Llama 3, Mistral's newer tokenizers and others after them) tokenize bytes, not characters, so that
// every text has ids and none is "unknown". Hugging Face's tokenizer.json describes the pipeline; zhost does:
//
// 1. Added tokens (`added_tokens`: GPT-2's <|endoftext|>, Llama 3's <|begin_of_text|> ...) are found in the raw
//    text first, leftmost and, where several start at one place, longest; each becomes its id, and the text between
//    them goes through 2-4 on its own. As in HF, the tokens with `normalized: false` are found first, then those
//    with `normalized: true` in what is left (there is no normalizer, so both match the raw text).
// 2. Pre-tokenization cuts the text into pieces with a regex (pretokenizer.hpp): GPT-2's, which the ByteLevel
//    pre-tokenizer applies when its use_regex is on, or the regex of a Split before a ByteLevel without its own
//    (Llama 3's, or GPT-2's). ByteLevel's add_prefix_space puts a space before a text that does not start with one.
//    Pieces are words with the space before them, runs of digits, of punctuation and of whitespace; a newline is
//    whitespace and ends up in the ids like any other character.
// 3. Each byte of a piece stands for one of 256 printable characters (GPT-2's bytes_to_unicode: the printable
//    Latin-1 bytes for themselves, the 68 others for U+0100 onwards, so a space is "Ġ"), in which the vocab's
//    tokens are spelled. The piece starts as one symbol per byte, with the id of that byte's character (a byte
//    missing from the vocab gives unk_token, fused with the unknown bytes next to it under fuse_unk, and nothing
//    when there is no unk_token, as in HF).
// 4. BPE: `merges` lists pairs of tokens by priority (rank = place in the list). The adjacent pair with the lowest
//    rank, leftmost among equal ranks, becomes the token spelled by the two together, and so on until no adjacent
//    pair has a merge. Candidate pairs wait in a min-heap on (rank, position), so a piece of n bytes takes
//    O(n log n); a candidate that a merge beside it made stale is skipped when it comes up (the same check as
//    HF's word.rs, so ties and stale entries resolve as there). Under ignore_merges (Llama 3) a piece that is itself
//    a token of the vocab is that token.
//
// A piece's ids depend on its bytes alone, so they are cached by piece (up to kMaxCachedPiece bytes). The ids equal
// HF's `Tokenizer.encode(text, add_special_tokens=False).ids`: the post-processor's BOS/EOS are not added, and
// truncation, padding and the decoder play no part. What else a tokenizer.json can ask for (a normalizer, other
// pre-tokenizers or models, BPE dropout, continuing-subword prefixes or end-of-word suffixes, byte_fallback, added
// tokens that strip spaces or match whole words only) is refused with its name when the file is opened.
#include "host/data/bpe_tokenizer.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "host/core/error.hpp"
#include "host/data/pretokenizer.hpp"

namespace zhost::data {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxCachedPiece = 256;        // bytes: longer pieces (long runs of spaces, say) are not cached
constexpr size_t kMaxCachedPieces = 1u << 20;  // then the cache starts afresh

// GPT-2's bytes_to_unicode: the character that stands for each byte, in UTF-8.
std::array<std::string, 256> byte_characters() {
  std::array<std::string, 256> characters;
  char32_t next = 256;
  for (int byte = 0; byte < 256; ++byte) {
    const bool printable = (byte >= 33 && byte <= 126) || (byte >= 161 && byte <= 172) || byte >= 174;
    const char32_t c = printable ? static_cast<char32_t>(byte) : next++;
    std::string& out = characters[static_cast<size_t>(byte)];
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else {  // below U+0800: two bytes
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return characters;
}

uint64_t pair_key(uint32_t left, uint32_t right) { return (static_cast<uint64_t>(left) << 32) | right; }

struct Merge {
  uint32_t rank;    // place in `merges`: lower merges first
  uint32_t merged;  // the id of the two tokens spelled together
};

// A symbol of a piece being merged: a token, linked to its neighbours (-1: none).
struct Symbol {
  uint32_t id;
  int32_t prev;
  int32_t next;
  bool alive;  // false once merged into the symbol on its left
};

// A pair that may merge: symbols[position] with the symbol after it, into `merged`.
struct Candidate {
  uint32_t rank;
  int32_t position;
  uint32_t merged;
};

// For std::push_heap: a min-heap on (rank, position).
bool later(const Candidate& a, const Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.position > b.position;
}

struct AddedToken {
  std::string content;
  uint32_t id;
};

// Added tokens found in text, leftmost-longest (Note [Byte-level BPE], 1).
class AddedTokenSet {
 public:
  void add(AddedToken token) {
    const auto first = static_cast<unsigned char>(token.content[0]);
    auto& list = by_first_byte_[first];
    list.push_back(std::move(token));
    std::stable_sort(list.begin(), list.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  }
  bool empty() const {
    return std::all_of(by_first_byte_.begin(), by_first_byte_.end(), [](const auto& list) { return list.empty(); });
  }
  // The first match at or after `from`: its place and token; nullptr when there is none.
  const AddedToken* find(std::string_view text, size_t from, size_t& at) const {
    for (at = from; at < text.size(); ++at) {
      for (const AddedToken& token : by_first_byte_[static_cast<unsigned char>(text[at])]) {
        if (text.substr(at, token.content.size()) == token.content) return &token;
      }
    }
    return nullptr;
  }

 private:
  std::array<std::vector<AddedToken>, 256> by_first_byte_;  // longest first
};

// Heterogeneous lookup: the cache is searched with the piece's string_view.
struct PieceHash {
  using is_transparent = void;
  size_t operator()(std::string_view piece) const { return std::hash<std::string_view>{}(piece); }
};

std::string describe(const json& value) {
  if (value.is_object() && value.contains("type") && value["type"].is_string()) return value["type"].get<std::string>();
  std::string text = value.dump();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

class ByteLevelBpe final : public TokenizerModel {
 public:
  explicit ByteLevelBpe(const std::string& path) : path_(path), byte_characters_(byte_characters()) {
    const json root = parse(path);
    if (!root.is_object() || !root.contains("model") || !root["model"].is_object())
      refuse("it has no \"model\" object, so it is no tokenizer.json");
    try {
      if (root.contains("normalizer") && !root["normalizer"].is_null())
        refuse("normalizer {} is not supported", describe(root["normalizer"]));
      read_pre_tokenizer(root.contains("pre_tokenizer") ? root["pre_tokenizer"] : json());
      read_model(root["model"]);
      if (root.contains("added_tokens")) read_added_tokens(root["added_tokens"]);
    } catch (const json::exception& e) {  // a field of another type than HF writes (json::value's checks)
      refuse("a field has an unexpected type ({})", e.what());
    }
  }

  int64_t vocab() const override { return vocab_size_; }

  void encode(std::string_view text, std::vector<uint32_t>& ids) const override {
    split_added(unnormalized_, text, ids, [&](std::string_view rest) {
      split_added(normalized_, rest, ids, [&](std::string_view segment) { encode_segment(segment, ids); });
    });
  }

 private:
  json parse(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) fail_usage("data.tokenizer '{}' cannot be read; check the path and its permissions", path);
    std::stringstream text;
    text << in.rdbuf();
    try {
      return json::parse(text.str());
    } catch (const json::exception& e) {
      fail_usage("data.tokenizer '{}' is not JSON ({}); point it at an HF tokenizer.json", path, e.what());
    }
  }

  // One line: what is wrong, and what zhost reads instead.
  template <typename... Args>
  [[noreturn]] void refuse(fmt::format_string<Args...> format, Args&&... args) const {
    fail_usage(
        "data.tokenizer '{}': {}; zhost reads byte-level BPE tokenizer.json files like GPT-2's and Llama 3's, and "
        "SentencePiece tokenizer.model files (or tokenize beforehand and use data.type = \"tokens\")",
        path_, fmt::format(format, std::forward<Args>(args)...));
  }

  // ByteLevel (its own regex or none), or Sequence [Split (GPT-2's or Llama 3's regex), ByteLevel (no regex)].
  void read_pre_tokenizer(const json& pre) {
    const auto byte_level = [&](const json& step) {
      if (!step.is_object() || step.value("type", "") != "ByteLevel") return false;
      add_prefix_space_ = step.value("add_prefix_space", false);
      return true;
    };
    if (byte_level(pre)) {
      split_ = pre.value("use_regex", true) ? SplitPattern::kGpt2 : SplitPattern::kNone;
      return;
    }
    if (pre.is_object() && pre.value("type", "") == "Sequence" && pre.contains("pretokenizers") &&
        pre["pretokenizers"].is_array() && pre["pretokenizers"].size() == 2) {
      const json& split = pre["pretokenizers"][0];
      const json& last = pre["pretokenizers"][1];
      if (split.is_object() && split.value("type", "") == "Split" && byte_level(last)) {
        if (last.value("use_regex", true))
          refuse("pre_tokenizer Sequence [Split, ByteLevel with use_regex] (two regexes) is not supported");
        if (add_prefix_space_)
          refuse("pre_tokenizer Sequence [Split, ByteLevel with add_prefix_space] is not supported");
        if (split.value("behavior", "") != "Isolated" || split.value("invert", false))
          refuse("pre_tokenizer Split with behavior {} and invert {} is not supported (only Isolated, not inverted)",
                 describe(split.value("behavior", json())), describe(split.value("invert", json())));
        const json pattern = split.value("pattern", json::object()).value("Regex", json());
        if (pattern == kGpt2Regex) {
          split_ = SplitPattern::kGpt2;
        } else if (pattern == kLlama3Regex) {
          split_ = SplitPattern::kLlama3;
        } else {
          refuse("pre_tokenizer Split with pattern {} is not supported (zhost knows GPT-2's and Llama 3's regexes)",
                 describe(split.value("pattern", json())));
        }
        return;
      }
    }
    refuse("pre_tokenizer {} is not supported (only ByteLevel, or Sequence [Split, ByteLevel])", describe(pre));
  }

  void read_model(const json& model) {
    if (model.value("type", "BPE") != "BPE") refuse("model type {} is not supported", describe(model["type"]));
    const auto unset = [&](const char* key) {
      return !model.contains(key) || model[key].is_null() || model[key] == "" || model[key] == false ||
             model[key] == 0.0;
    };
    for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"}) {
      if (!unset(key)) refuse("model.{} = {} is not supported", key, model[key].dump());
    }
    ignore_merges_ = model.value("ignore_merges", false);
    fuse_unk_ = model.value("fuse_unk", false);
    if (!model.contains("vocab") || !model["vocab"].is_object() || model["vocab"].empty())
      refuse("model.vocab is not an object of tokens and their ids");
    for (const auto& [token, id] : model["vocab"].items()) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() > UINT32_MAX)
        refuse("model.vocab gives \"{}\" the id {}, not an id", token, id.dump());
      vocab_.emplace(token, id.get<uint32_t>());
      vocab_size_ = std::max<int64_t>(vocab_size_, id.get<int64_t>() + 1);
    }
    for (size_t byte = 0; byte < 256; ++byte) {
      const auto found = vocab_.find(byte_characters_[byte]);
      byte_ids_[byte] = found == vocab_.end() ? int64_t{-1} : int64_t{found->second};
    }
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const auto found = vocab_.find(model["unk_token"].get<std::string>());
      if (found == vocab_.end()) refuse("model.unk_token {} is not in model.vocab", model["unk_token"].dump());
      unk_ = found->second;
    }
    if (!model.contains("merges") || !model["merges"].is_array()) refuse("model.merges is not a list of pairs");
    const json& merges = model["merges"];
    merges_.reserve(merges.size());
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      // ["a", "b"] (tokenizers 0.20 on) or "a b" (before)
      const json& merge = merges[rank];
      std::string left, right;
      if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
        left = merge[0].get<std::string>();
        right = merge[1].get<std::string>();
      } else if (merge.is_string() && std::count(merge.get_ref<const std::string&>().begin(),
                                                 merge.get_ref<const std::string&>().end(), ' ') == 1) {
        const std::string& both = merge.get_ref<const std::string&>();
        left = both.substr(0, both.find(' '));
        right = both.substr(both.find(' ') + 1);
      } else {
        refuse("model.merges[{}] = {} is not a pair of tokens", rank, describe(merge));
      }
      const uint32_t left_id = token_id(left, rank);
      const uint32_t right_id = token_id(right, rank);
      const uint32_t merged = token_id(left + right, rank);
      merges_[pair_key(left_id, right_id)] = Merge{static_cast<uint32_t>(rank), merged};  // a repeat: the last wins
    }
  }

  uint32_t token_id(const std::string& token, size_t rank) const {
    const auto found = vocab_.find(token);
    if (found == vocab_.end())
      refuse("model.merges[{}] makes or uses \"{}\", which is not in model.vocab", rank, token);
    return found->second;
  }

  void read_added_tokens(const json& added) {
    if (!added.is_array()) refuse("added_tokens is not a list");
    for (size_t i = 0; i < added.size(); ++i) {
      const json& token = added[i];
      if (!token.is_object() || !token.contains("content") || !token["content"].is_string() ||
          token["content"].get_ref<const std::string&>().empty() || !token.contains("id") ||
          !token["id"].is_number_unsigned() || token["id"].get<uint64_t>() > UINT32_MAX)
        refuse("added_tokens[{}] = {} is not a token with a content and an id", i, describe(token));
      for (const char* key : {"lstrip", "rstrip", "single_word"}) {
        if (token.value(key, false))
          refuse("added token {} has {} set, which is not supported", token["content"].dump(), key);
      }
      AddedToken entry{token["content"].get<std::string>(), token["id"].get<uint32_t>()};
      vocab_size_ = std::max<int64_t>(vocab_size_, int64_t{entry.id} + 1);
      const bool normalized = token.value("normalized", !token.value("special", false));
      (normalized ? normalized_ : unnormalized_).add(std::move(entry));
    }
  }

  // Calls `between(segment)` for the text between the added tokens of `tokens` (all of it when there are none,
  // empty segments left out) and appends the tokens' ids in their places.
  template <typename Between>
  void split_added(const AddedTokenSet& tokens, std::string_view text, std::vector<uint32_t>& ids,
                   Between&& between) const {
    size_t from = 0;
    size_t at = 0;
    if (!tokens.empty()) {
      while (const AddedToken* token = tokens.find(text, from, at)) {
        if (at > from) between(text.substr(from, at - from));
        ids.push_back(token->id);
        from = at + token->content.size();
      }
    }
    if (from < text.size()) between(text.substr(from));
  }

  void encode_segment(std::string_view text, std::vector<uint32_t>& ids) const {
    std::string prefixed;
    if (add_prefix_space_ && text.front() != ' ') {
      prefixed.reserve(text.size() + 1);
      prefixed.append(" ").append(text);
      text = prefixed;
    }
    PreTokenizer pieces(split_, text);
    for (std::string_view piece; pieces.next(piece);) encode_piece(piece, ids);
  }

  void encode_piece(std::string_view piece, std::vector<uint32_t>& ids) const {
    const bool cached = piece.size() <= kMaxCachedPiece;
    if (cached) {
      const auto hit = cache_.find(piece);
      if (hit != cache_.end()) {
        const auto [first, count] = hit->second;
        ids.insert(ids.end(), cache_ids_.begin() + first, cache_ids_.begin() + first + count);
        return;
      }
    }
    const size_t before = ids.size();
    merge(piece, ids);
    if (!cached) return;
    if (cache_.size() >= kMaxCachedPieces) {
      cache_.clear();
      cache_ids_.clear();
    }
    cache_.emplace(std::string(piece), std::pair<size_t, size_t>(cache_ids_.size(), ids.size() - before));
    cache_ids_.insert(cache_ids_.end(), ids.begin() + static_cast<ptrdiff_t>(before), ids.end());
  }

  // Note [Byte-level BPE], 3 and 4.
  void merge(std::string_view piece, std::vector<uint32_t>& ids) const {
    if (ignore_merges_) {
      std::string spelled;
      for (const char byte : piece) spelled += byte_characters_[static_cast<unsigned char>(byte)];
      const auto found = vocab_.find(spelled);
      if (found != vocab_.end()) {
        ids.push_back(found->second);
        return;
      }
    }
    std::vector<Symbol>& symbols = symbols_;
    symbols.clear();
    const auto append = [&](uint32_t id) {
      const auto index = static_cast<int32_t>(symbols.size());
      symbols.push_back({id, index - 1, index + 1, true});
    };
    bool unknown = false;  // unknown bytes not yet added as unk_ (fused under fuse_unk)
    for (const char byte : piece) {
      const int64_t id = byte_ids_[static_cast<unsigned char>(byte)];
      if (id >= 0) {
        if (unknown) append(*unk_);
        unknown = false;
        append(static_cast<uint32_t>(id));
      } else if (unk_) {
        if (unknown && !fuse_unk_) append(*unk_);
        unknown = true;
      }
    }
    if (unknown) append(*unk_);
    if (symbols.empty()) return;
    symbols.back().next = -1;

    std::vector<Candidate>& heap = heap_;
    heap.clear();
    const auto consider = [&](int32_t left) {
      const int32_t right = symbols[static_cast<size_t>(left)].next;
      if (right < 0) return;
      const auto found =
          merges_.find(pair_key(symbols[static_cast<size_t>(left)].id, symbols[static_cast<size_t>(right)].id));
      if (found == merges_.end()) return;
      heap.push_back({found->second.rank, left, found->second.merged});
      std::push_heap(heap.begin(), heap.end(), later);
    };
    for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) consider(i);
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const Candidate top = heap.back();
      heap.pop_back();
      Symbol& left = symbols[static_cast<size_t>(top.position)];
      if (!left.alive || left.next < 0) continue;
      Symbol& right = symbols[static_cast<size_t>(left.next)];
      const auto found = merges_.find(pair_key(left.id, right.id));
      if (found == merges_.end() || found->second.merged != top.merged) continue;  // stale
      left.id = top.merged;
      right.alive = false;
      left.next = right.next;
      if (right.next >= 0) symbols[static_cast<size_t>(right.next)].prev = top.position;
      if (left.prev >= 0) consider(left.prev);
      consider(top.position);
    }
    for (int32_t i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next)
      ids.push_back(symbols[static_cast<size_t>(i)].id);
  }

  std::string path_;
  std::array<std::string, 256> byte_characters_;
  std::unordered_map<std::string, uint32_t> vocab_;  // tokens spelled in byte characters
  std::unordered_map<uint64_t, Merge> merges_;       // by pair_key(left, right)
  std::array<int64_t, 256> byte_ids_{};              // each byte's token; -1: not in the vocab
  std::optional<uint32_t> unk_;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  SplitPattern split_ = SplitPattern::kGpt2;
  bool add_prefix_space_ = false;
  AddedTokenSet unnormalized_;  // found first
  AddedTokenSet normalized_;
  int64_t vocab_size_ = 0;

  // Not thread-safe: one thread encodes at a time (the data loader tokenizes once, when it opens).
  mutable std::unordered_map<std::string, std::pair<size_t, size_t>, PieceHash, std::equal_to<>> cache_;
  mutable std::vector<uint32_t> cache_ids_;  // the cached pieces' ids: [first, first + count) per piece
  mutable std::vector<Symbol> symbols_;      // merge()'s, kept for their capacity
  mutable std::vector<Candidate> heap_;
};

}  // namespace

std::unique_ptr<TokenizerModel> open_byte_level_bpe(const std::string& path) {
  return std::make_unique<ByteLevelBpe>(path);
}

}  // namespace zhost::data
