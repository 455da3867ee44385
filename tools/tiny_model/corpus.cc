#include "tools/tiny_model/corpus.h"

#include <cstdint>
#include <string>
#include <vector>

namespace ditserve::tiny_model {
namespace {

// Word lists of the kind image prompts are made of. Changing them changes every generated
// tokenizer (and so the tiny model's ids): treat them as frozen.
const char* const kAdjectives[] = {
    "small", "large", "tiny", "huge", "old", "young", "ancient", "modern", "quiet", "busy",
    "bright", "dark", "shiny", "dusty", "wooden", "golden", "silver", "glass", "stone", "velvet",
    "foggy", "sunny", "rainy", "snowy", "misty", "cozy", "lonely", "happy", "sleepy", "curious",
    "elegant", "rustic", "futuristic", "vintage", "colorful", "peaceful", "mysterious", "majestic",
    "delicate", "detailed", "soft", "sharp", "warm", "cold", "gentle", "wild", "fluffy", "striped",
    "painted", "glowing", "floating", "broken", "hidden", "famous", "strange", "beautiful",
    "dramatic", "serene", "vibrant", "muted"};
const char* const kColors[] = {"red", "blue", "green", "yellow", "orange", "purple", "pink",
                               "brown", "black", "white", "gray", "teal", "crimson", "amber",
                               "turquoise", "ivory", "emerald", "violet", "indigo", "scarlet"};
const char* const kNouns[] = {
    "cat", "dog", "fox", "owl", "horse", "rabbit", "dragon", "robot", "astronaut", "knight",
    "wizard", "girl", "boy", "woman", "man", "child", "teacher", "sailor", "painter", "farmer",
    "house", "castle", "tower", "bridge", "garden", "forest", "mountain", "river", "lake", "ocean",
    "beach", "desert", "village", "city", "street", "market", "library", "kitchen", "window",
    "door", "table", "chair", "lamp", "book", "bowl", "cup", "teapot", "flower", "tree", "leaf",
    "apple", "orange", "bread", "cake", "boat", "ship", "train", "car", "bicycle", "balloon",
    "clock", "mirror", "candle", "guitar", "piano", "violin", "camera", "umbrella", "hat",
    "sweater", "scarf", "butterfly", "bird", "whale", "turtle", "elephant", "tiger", "lion",
    "bear", "wolf", "moon", "sun", "star", "cloud", "storm", "rainbow", "planet", "lighthouse",
    "windmill", "cottage", "station", "harbor", "meadow", "canyon", "waterfall", "island"};
const char* const kVerbs[] = {
    "sitting", "standing", "sleeping", "running", "walking", "flying", "swimming", "reading",
    "dancing", "singing", "painting", "cooking", "watching", "holding", "climbing", "jumping",
    "resting", "playing", "waiting", "looking", "floating", "glowing", "hiding", "exploring",
    "drinking", "eating", "smiling", "laughing", "thinking", "dreaming"};
const char* const kPrepositions[] = {"on", "in", "under", "near", "beside", "behind", "above",
                                     "below", "inside", "across", "along", "around", "between",
                                     "over", "through", "at", "by", "with", "without", "from"};
const char* const kStyles[] = {
    "oil painting", "watercolor", "photograph", "digital art", "pencil sketch", "3d render",
    "pixel art", "studio lighting", "cinematic lighting", "soft focus", "shallow depth of field",
    "high resolution", "highly detailed", "award winning", "concept art", "illustration",
    "film grain", "long exposure", "golden hour", "blue hour", "isometric view", "wide angle",
    "close up", "macro shot", "aerial view", "motion blur", "black and white", "sepia tone",
    "impressionist style", "art nouveau", "minimalist", "surreal", "ukiyo-e", "low poly",
    "studio ghibli style", "hyperrealistic", "matte painting", "bokeh", "8k", "4k"};
const char* const kTimes[] = {"at dawn", "at sunset", "at night", "in the morning",
                              "in the afternoon", "in winter", "in spring", "in summer",
                              "in autumn", "during a storm", "under the stars", "after the rain"};
const char* const kOpeners[] = {"a photo of", "a painting of", "a picture of", "an image of",
                                "a drawing of", "a close-up of", "a portrait of", "a view of",
                                "there is", "here is", "this is", "we see"};
const char* const kPlainSentences[] = {
    "The quick brown fox jumps over the lazy dog.",
    "It was a bright cold day in April, and the clocks were striking thirteen.",
    "She sells sea shells by the sea shore.",
    "How much wood would a woodchuck chuck if a woodchuck could chuck wood?",
    "Numbers like 0, 1, 2, 3, 4, 5, 6, 7, 8 and 9 appear in dates such as 1999 or 2024.",
    "Prices went from $12.50 to $19.99 (about 60% more) in 3 years!",
    "Email me at hello@example.com; I'll reply within 24 hours.",
    "Don't forget: it's the cat's toy, not the dog's.",
    "What's the time? It's 10:45 am, and we're late.",
    "Symbols: # * + - = / \\ | < > [ ] { } ^ _ ` ~ & are rarely typed.",
    "Quotes \"like this\" and 'like that' are both common.",
    "A generator of images turns a text prompt into a picture.",
    "The diffusion model removes noise step by step until an image appears.",
    "Every picture tells a story, and every story needs a picture."};

template <typename T, size_t N>
constexpr size_t Count(const T (&)[N]) {
  return N;
}

// A fixed 64-bit LCG (Knuth's MMIX constants): identical on every platform, unlike <random>'s
// distributions.
class Lcg {
 public:
  explicit Lcg(uint64_t seed) : state_(seed) {}
  size_t Below(size_t n) {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<size_t>((state_ >> 33) % n);
  }

 private:
  uint64_t state_;
};

template <size_t N>
const char* Pick(Lcg& rng, const char* const (&list)[N]) {
  return list[rng.Below(N)];
}

std::string Article(const std::string& next) {
  return next.find_first_of("aeiou") == 0 ? "an " : "a ";
}

// Every random choice is drawn into a named local, in a fixed order: the operands of `+` are
// evaluated in an unspecified order, which would make the text compiler-dependent.
std::string MakeSentence(Lcg& rng) {
  const bool use_color = rng.Below(2) == 0;
  const std::string adj = use_color ? Pick(rng, kColors) : Pick(rng, kAdjectives);
  const std::string noun = Pick(rng, kNouns);
  const size_t form = rng.Below(5);
  std::string s;
  if (form == 0) {
    const std::string opener = Pick(rng, kOpeners);
    s = opener + " " + Article(adj) + adj + " " + noun;
  } else if (form == 1) {
    const std::string verb = Pick(rng, kVerbs);
    const std::string prep = Pick(rng, kPrepositions);
    const std::string place = Pick(rng, kNouns);
    s = Article(adj) + adj + " " + noun + " " + verb + " " + prep + " the " + place;
  } else if (form == 2) {
    const std::string verb = Pick(rng, kVerbs);
    const std::string time = Pick(rng, kTimes);
    s = "the " + noun + " is " + verb + " " + time;
  } else if (form == 3) {
    const std::string color = Pick(rng, kColors);
    const std::string other = Pick(rng, kNouns);
    const std::string prep = Pick(rng, kPrepositions);
    const std::string adj2 = Pick(rng, kAdjectives);
    const std::string place = Pick(rng, kNouns);
    s = Article(color) + color + " " + noun + " and " + other + "s " + prep + " " +
        Article(adj2) + adj2 + " " + place;
  } else {
    const std::string opener = Pick(rng, kOpeners);
    const std::string time = Pick(rng, kTimes);
    s = opener + " " + noun + "s " + time;
  }
  // Most prompts carry style tags after commas.
  const size_t tags = rng.Below(3);
  for (size_t i = 0; i < tags; ++i) {
    const std::string style = Pick(rng, kStyles);
    s += ", " + style;
  }
  if (rng.Below(4) == 0) s[0] = static_cast<char>(s[0] - 'a' + 'A');
  if (rng.Below(3) == 0) s += ".";
  return s;
}

std::string BuildCorpus() {
  std::string text;
  // Every listed word at least once on its own, so no word depends on the sampler reaching it.
  auto add_all = [&](const char* const* list, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      text += list[i];
      text += '\n';
    }
  };
  add_all(kAdjectives, Count(kAdjectives));
  add_all(kColors, Count(kColors));
  add_all(kNouns, Count(kNouns));
  add_all(kVerbs, Count(kVerbs));
  add_all(kStyles, Count(kStyles));
  add_all(kPlainSentences, Count(kPlainSentences));
  Lcg rng(20240611);
  for (int i = 0; i < 3000; ++i) {
    text += MakeSentence(rng);
    text += '\n';
  }
  return text;
}

}  // namespace

const std::string& EmbeddedCorpus() {
  static const std::string* corpus = new std::string(BuildCorpus());
  return *corpus;
}

}  // namespace ditserve::tiny_model
