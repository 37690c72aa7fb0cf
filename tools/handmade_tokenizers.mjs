// Small tokenizer.json files that exercise the parts of the format the real Llama/Qwen
// tokenizers do not: byte fallback, Metaspace, NFKC/Lowercase/Strip, Bert-style normalization,
// Digits/Punctuation/Whitespace pre-tokenizers, each Split behavior, and the WordPiece, Strip,
// Replace, Fuse and ByteFallback decoders. Their BPE merges are learned here from a small corpus
// so that encodings are non-trivial.

export const BYTE_LEVEL_CHARS = (() => {
  const printable = (b) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const table = [];
  let next = 0;
  for (let b = 0; b < 256; ++b) table.push(String.fromCodePoint(printable(b) ? b : 256 + next++));
  return table;
})();

export function byteLevel(text) {
  return Array.from(new TextEncoder().encode(text), (b) => BYTE_LEVEL_CHARS[b]).join('');
}

// Learns `count` merges over words given as symbol lists; returns the merges in order.
export function learnMerges(words, count, joinPair = (a, b) => a + b) {
  words = words.map((w) => [...w]);
  const merges = [];
  for (let m = 0; m < count; ++m) {
    const pairs = new Map();
    for (const w of words) {
      for (let i = 0; i + 1 < w.length; ++i) {
        const key = w[i] + '\u0000' + w[i + 1];
        pairs.set(key, (pairs.get(key) ?? 0) + 1);
      }
    }
    let best = null;
    let bestCount = 1;
    for (const [key, n] of pairs) {
      if (n > bestCount || (n === bestCount && best !== null && key < best)) {
        best = key;
        bestCount = n;
      }
    }
    if (best === null) break;
    const [a, b] = best.split('\u0000');
    merges.push([a, b]);
    for (const w of words) {
      for (let i = 0; i + 1 < w.length; ++i) {
        if (w[i] === a && w[i + 1] === b) w.splice(i, 2, joinPair(a, b));
      }
    }
  }
  return merges;
}

function vocabFrom(specials, symbols, merges, joinPair = (a, b) => a + b) {
  const vocab = {};
  for (const s of [...specials, ...symbols]) if (!(s in vocab)) vocab[s] = Object.keys(vocab).length;
  for (const [a, b] of merges) {
    const merged = joinPair(a, b);
    if (!(merged in vocab)) vocab[merged] = Object.keys(vocab).length;
  }
  return vocab;
}

function frequentChars(texts, minCount) {
  const counts = new Map();
  for (const t of texts) for (const c of t) counts.set(c, (counts.get(c) ?? 0) + 1);
  return [...counts].filter(([, n]) => n >= minCount).map(([c]) => c).sort();
}

function addedToken(id, content, options = {}) {
  return {
    id, content, single_word: false, lstrip: false, rstrip: false,
    normalized: false, special: true, ...options,
  };
}

function tokenizerJson({ normalizer = null, pre_tokenizer = null, post_processor = null, decoder = null, model, added_tokens }) {
  return { version: '1.0', truncation: null, padding: null, added_tokens, normalizer, pre_tokenizer, post_processor, decoder, model };
}

function bpe(vocab, merges, options = {}) {
  return {
    type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: null,
    end_of_word_suffix: null, fuse_unk: false, byte_fallback: false, ignore_merges: false,
    vocab, merges, ...options,
  };
}

// Returns {name: tokenizer.json object} built from `corpus` (an array of strings).
export function makeHandmadeTokenizers(corpus) {
  const tokenizers = {};
  const lines = corpus.filter((t) => t.length > 0);

  // 1. SentencePiece-style BPE with byte fallback (the Llama 2 / Mistral layout).
  {
    const normalize = (t) => '\u2581' + t.replaceAll(' ', '\u2581');
    const words = lines.flatMap((t) => normalize(t).split(/(?=\u2581)/u)).map((w) => [...w]);
    const merges = learnMerges(words, 300);
    const bytes = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    const vocab = vocabFrom(['<unk>', '<s>', '</s>', ...bytes], frequentChars(lines.map(normalize), 3), merges);
    const extra = Object.keys(vocab).length;
    tokenizers.sentencepiece_byte_fallback = tokenizerJson({
      normalizer: { type: 'Sequence', normalizers: [
        { type: 'Prepend', prepend: '\u2581' },
        { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' },
      ] },
      post_processor: {
        type: 'TemplateProcessing',
        single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
        pair: [{ Sequence: { id: 'A', type_id: 0 } }, { Sequence: { id: 'B', type_id: 1 } }],
        special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
      },
      decoder: { type: 'Sequence', decoders: [
        { type: 'Replace', pattern: { String: '\u2581' }, content: ' ' },
        { type: 'ByteFallback' },
        { type: 'Fuse' },
        { type: 'Strip', content: ' ', start: 1, stop: 0 },
      ] },
      model: bpe(vocab, merges.map(([a, b]) => `${a} ${b}`), { unk_token: '<unk>', byte_fallback: true, fuse_unk: true }),
      added_tokens: [
        addedToken(0, '<unk>'), addedToken(1, '<s>'), addedToken(2, '</s>'),
        addedToken(extra, '[MASK]', { lstrip: true, rstrip: true }),
        addedToken(extra + 1, '<sep>', { special: false }),
      ],
    });
  }

  // 2. Metaspace with NFKC + Lowercase + Strip, digits split off. (No Punctuation pre-tokenizer:
  //    transformers.js keeps runs of punctuation together where Hugging Face isolates each.)
  {
    const normalize = (t) => t.normalize('NFKC').toLowerCase().trim();
    const words = lines.flatMap((t) => normalize(t).split(/(?=\s)/u)).map((w) => [...w.replace(/\s/gu, '\u2581')]);
    const merges = learnMerges(words, 250);
    const vocab = vocabFrom(['<unk>', '<mask>'], ['\u2581', ...frequentChars(lines.map(normalize), 2)], merges);
    tokenizers.metaspace_nfkc = tokenizerJson({
      normalizer: { type: 'Sequence', normalizers: [
        { type: 'NFKC' }, { type: 'Lowercase' }, { type: 'Strip', strip_left: true, strip_right: true },
      ] },
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'Digits', individual_digits: true },
        { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true },
      ] },
      decoder: { type: 'Metaspace', replacement: '\u2581', prepend_scheme: 'always', split: true },
      model: bpe(vocab, merges, { unk_token: '<unk>' }),
      added_tokens: [addedToken(0, '<unk>'), addedToken(1, '<mask>', { lstrip: true })],
    });
  }

  // 3. Bert-style normalization and pre-tokenization, WordPiece decoding, [CLS] A [SEP].
  {
    const words = lines.flatMap((t) => t.toLowerCase().normalize('NFD').replace(/\p{Mn}/gu, '').split(/[\s\p{P}]+/u)).filter((w) => w);
    const merges = learnMerges(words, 250);
    const vocab = vocabFrom(['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'],
      frequentChars(words, 2), merges);
    tokenizers.bert_like = tokenizerJson({
      normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
      pre_tokenizer: { type: 'BertPreTokenizer' },
      post_processor: { type: 'BertProcessing', sep: ['[SEP]', 3], cls: ['[CLS]', 2] },
      decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
      model: bpe(vocab, merges, { unk_token: '[UNK]' }),
      added_tokens: ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'].map((t, i) => addedToken(i, t)),
    });
  }

  // 4. Byte-level BPE with a prefix space and GPT-2's regex (RoBERTa layout), NFD + accents off.
  const byteWords = lines.flatMap((t) => (' ' + t).match(/ ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+/gu) ?? []).map((w) => [...byteLevel(w)]);
  const byteMerges = learnMerges(byteWords, 300);
  const byteVocab = vocabFrom(['<s>', '<pad>', '</s>', '<unk>'], BYTE_LEVEL_CHARS, byteMerges);
  const byteExtra = Object.keys(byteVocab).length;
  tokenizers.byte_level_roberta = tokenizerJson({
    normalizer: { type: 'Sequence', normalizers: [
      { type: 'NFD' }, { type: 'StripAccents' },
      { type: 'Replace', pattern: { Regex: '\\s*\\n\\s*' }, content: '\n' },
    ] },
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    post_processor: { type: 'RobertaProcessing', sep: ['</s>', 2], cls: ['<s>', 0], trim_offsets: true, add_prefix_space: true },
    decoder: { type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: bpe(byteVocab, byteMerges),
    added_tokens: [
      addedToken(0, '<s>'), addedToken(1, '<pad>'), addedToken(2, '</s>'), addedToken(3, '<unk>'),
      addedToken(byteExtra, '<mask>', { lstrip: true }),
    ],
  });

  // 5. Split, removing or isolating the matches, then byte-level without a regex.
  //    (transformers.js implements only these two behaviors, so the others are checked by
  //    prism's unit tests against the behaviors Hugging Face documents.)
  for (const [name, behavior] of [['split_removed', 'Removed'], ['split_isolated', 'Isolated']]) {
    tokenizers[name] = tokenizerJson({
      pre_tokenizer: { type: 'Sequence', pretokenizers: [
        { type: 'Split', pattern: { Regex: '[,;:]|\\d|\\s+' }, behavior, invert: false },
        { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
      ] },
      decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: false, use_regex: false },
      model: bpe(byteVocab, byteMerges, { ignore_merges: true }),
      added_tokens: [addedToken(0, '<s>'), addedToken(2, '</s>')],
    });
  }

  // 6. Whitespace pre-tokenizer, a regex Replace normalizer, and Replace + Strip decoders.
  {
    const words = lines.flatMap((t) => t.match(/\w+|[^\w\s]+/gu) ?? []);
    const merges = learnMerges(words, 200);
    const vocab = vocabFrom(['<unk>'], frequentChars(words, 1), merges);
    tokenizers.whitespace_replace = tokenizerJson({
      normalizer: { type: 'Replace', pattern: { Regex: '[0-9]+' }, content: '#' },
      pre_tokenizer: { type: 'Whitespace' },
      decoder: { type: 'Sequence', decoders: [
        { type: 'Replace', pattern: { String: '#' }, content: '<num>' },
        { type: 'Strip', content: '<', start: 1, stop: 0 },
      ] },
      model: bpe(vocab, merges, { unk_token: '<unk>' }),
      added_tokens: [addedToken(0, '<unk>')],
    });
  }
  return tokenizers;
}

// Where transformers.js departs from Hugging Face's tokenizers, so that its output cannot serve
// as the reference: JavaScript's \s and String.trim() count U+FEFF as whitespace, TextDecoder
// drops a leading byte-order mark, its \d (Digits, Split patterns) is ASCII-only where
// Hugging Face's is Unicode, and its BertNormalizer keeps unassigned code points (Cn) that
// Hugging Face's drops. Strings with those characters are left out of the hand-made cases.
export function agreesWithHuggingFace(text) {
  return !text.includes('\uFEFF') && !/\p{Cn}/u.test(text) &&
    !/[^\x00-\x7F]/u.test((text.match(/\p{N}/gu) ?? []).join(''));
}

// Strings for the hand-made tokenizers: the fixture strings plus added-token cases.
export const HANDMADE_EXTRA_STRINGS = [
  'a [MASK] b', 'a   [MASK]   b', '[MASK]', 'x<sep>y', ' <sep> ', 'hello <mask> world',
  'hello<mask>world', '<mask>', '<s>hi</s>', 'x <unk> y', '[CLS] a [SEP]', 'UPPER lower MiXeD',
  'Ｆｕｌｌ ｗｉｄｔｈ ①②', 'ﬁne ﬂow', 'a,b;c:d 1 2 3', ',,;;', '12,34;56', 'no separators here',
];
