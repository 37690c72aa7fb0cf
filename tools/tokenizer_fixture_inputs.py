"""Inputs for the tokenizer and chat-template fixtures (tools/make_tokenizer_fixtures.py,
tools/make_lfm2_tokenizer.py): strings that exercise tokenizers (scripts, emoji sequences,
whitespace, numbers, code, special-token look-alikes) and conversations that exercise chat
templates. Changing them changes every fixture made from them, and the merges the hand-made
tokenizers learn from FIXTURE_STRINGS.
"""

_HAND_WRITTEN = [
    '', ' ', '  ', '\n', '\n\n', ' \n', '\t', '\r\n', 'a', 'A', '.', '...', '!!!', "'", '"',
    'Hello', 'Hello world', ' Hello world', 'Hello world ', 'Hello  world', 'Hello\tworld',
    'hello, world!', 'Hello, World! How are you today?', 'This is a test sentence.',
    "I'm here, you're there, they've gone, we'll see, he'd know, it's fine, don't.",
    "I'M HERE, YOU'RE THERE, THEY'VE GONE, WE'LL SEE, HE'D KNOW, IT'S FINE, DON'T.",
    "rock 'n' roll", "the dogs' bones", "'s 't 're 've 'm 'll 'd", "''quoted''",
    'The quick brown fox jumps over the lazy dog.', 'THE QUICK BROWN FOX', 'tHe QuIcK bRoWn',
    'grabbed', ' grabbed', '           grabbed', 'ax\n####\nboo', 'tabs\t\t\tout here',
    # Whitespace runs and line endings.
    'a  b   c    d     e', 'a\n\nb\n\n\nc', 'line one\nline two\r\nline three\rline four',
    '   leading spaces', 'trailing spaces   ', '\t\tindented with tabs', ' \t \n \t mixed',
    'word\u00a0no-break\u00a0space', 'thin\u2009space and\u3000ideographic space', 'zero\u200bwidth',
    'end with newline\n', '\n\n\nstart with newlines', '    ', '\n    \n    ', 'a \n b \n\n c',
    # Numbers.
    '0', '7', '42', '123', '1234', '12345', '123456789', '3.14159', '-273.15', '1,000,000',
    '1e10', '0xDEADBEEF', '2024-01-15', '12:34:56', '+1 (555) 123-4567', '99.9%', '$1,234.56',
    '١٢٣٤٥', '一二三', '①②③', 'Ⅻ', '½ ¾', '1st 2nd 3rd 4th', 'v1.2.3-beta+build.5',
    # European languages.
    'Français: les élèves étudient à l’école.', 'Deutsch: Größe, Straße, Übermäßig.',
    'Español: ¿Dónde está la biblioteca? ¡Aquí!', 'Português: não, coração, ações.',
    'Italiano: perché, città, più.', 'Polski: zażółć gęślą jaźń.', 'Čeština: příliš žluťoučký kůň.',
    'Svenska: räksmörgås, ö, å.', 'Norsk: blåbærsyltetøy.', 'Íslenska: þetta er ð.',
    'Türkçe: İstanbul, ılık, şeker, ğ.', 'Magyar: árvíztűrő tükörfúrógép.',
    'Română: știință, țară.', 'Ελληνικά: Καλημέρα κόσμε, ΑΒΓΔ αβγδ.',
    'Русский: Съешь же ещё этих мягких французских булок.', 'Українська: ґанок, їжак, є.',
    'Български: Здравей свят.', 'Српски: Ђурђевдан, Љубав, Њива.', 'Қазақша: сәлем әлем.',
    # Middle East, South Asia.
    'العربية: مرحبا بالعالم', 'עברית: שלום עולם', 'فارسی: سلام دنیا', 'اردو: ہیلو دنیا',
    'हिन्दी: नमस्ते दुनिया', 'বাংলা: হ্যালো বিশ্ব', 'தமிழ்: வணக்கம் உலகம்', 'తెలుగు: హలో ప్రపంచం',
    'ಕನ್ನಡ: ನಮಸ್ಕಾರ', 'മലയാളം: ഹലോ', 'ગુજરાતી: નમસ્તે', 'ਪੰਜਾਬੀ: ਸਤ ਸ੍ਰੀ ਅਕਾਲ', 'සිංහල: ආයුබෝවන්',
    'नेपाली: नमस्कार', 'मराठी: नमस्कार जग',
    # East and South-East Asia.
    '中文：你好，世界！', '繁體中文：這是一個測試。', '日本語：こんにちは世界。カタカナ、ひらがな、漢字。',
    '한국어: 안녕하세요 세계', 'ไทย: สวัสดีชาวโลก', 'Tiếng Việt: Xin chào thế giới, điều đó.',
    'ភាសាខ្មែរ: សួស្តី', 'ລາວ: ສະບາຍດີ', 'မြန်မာ: မင်္ဂလာပါ', 'Bahasa Indonesia: Selamat pagi dunia.',
    'Tagalog: Kumusta mundo.', '镇', '𠀀𠀁 rare CJK extension B', '漢字かなカナ混じり文', 'ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３',
    # Other scripts.
    'ქართული: გამარჯობა', 'Հայերեն: Բարեւ աշխարհ', 'አማርኛ: ሰላም ዓለም', 'ᏣᎳᎩ: ᎣᏏᏲ', 'ᐃᓄᒃᑎᑐᑦ',
    'Ꙋ', 'ᚠᚢᚦᚨᚱᚲ runes', '𐌰𐌱𐌲 gothic', 'ꦗꦮ javanese', 'ߒߞߏ nko', 'ⴰⵣⵓⵍ tifinagh',
    'Монгол: Сайн байна уу', 'ئۇيغۇرچە', 'ܐܪܡܝܐ syriac', 'ދިވެހި thaana',
    # Emoji and symbols.
    '🦙', '🦙Ꙋ', 'Ꙋ🦙', '😀😃😄', '👍🏽', '👨‍👩‍👧‍👦 family', '🏳️‍🌈 flag', '🇺🇸🇯🇵🇫🇷', '❤️ ♥ ❣',
    '🧑🏿‍💻 coder', '🤷‍♀️', '1️⃣ 2️⃣ #️⃣', '∑∫∂√∞ ≠ ≤ ≥', '→ ← ↑ ↓ ⇒', '© ® ™ § ¶', '★☆✓✗',
    '€ £ ¥ ₹ ₿', '♠♣♥♦', '« guillemets » „quotes“ ‘single’', '— – ‐ hyphens', '…ellipsis…',
    # Combining marks and normalization.
    'e\u0301 vs \u00e9', 'A\u030a vs \u00c5', 'n\u0303o', '\u1e9b\u0323', 'ﬁ ligature ﬂ', 'Å Ω K',
    'cafe\u0301 naïve coöperate', 'ㄱㅏ 가', '\u0915\u093c', 'Z̤͔ͧ̑̓ä͖̭̈̇lͮ̒ͫǵ̟̣o̮̲',
    # Code.
    'def f(x):\n    return x * 2\n', 'for (int i = 0; i < n; ++i) {\n\tsum += a[i];\n}',
    '#include <stdio.h>\nint main() { printf("hi\\n"); }', 'SELECT * FROM users WHERE id = 42;',
    '<div class="x">Hello &amp; bye</div>', '{"key": [1, 2, 3], "nested": {"a": null}}',
    'const x = () => { return `template ${y}`; };', 'fn main() { println!("{}", 1 + 2); }',
    'if __name__ == "__main__":\n    main()', '$ ls -la | grep foo > out.txt 2>&1',
    'https://example.com/path?query=1&b=2#frag', 'user@example.com', '/usr/local/bin/prism',
    'C:\\Windows\\System32', '// comment\n/* block */', '    indented code', '\tx = 1;\n\ty = 2;',
    'a+b=c', 'x**2 + y**2 == z**2', 'foo_bar_baz', 'camelCaseIdentifier', 'SCREAMING_SNAKE',
    '````python\nprint(1)\n````', '<<<>>>', '[[[]]]', '(((nested)))', '!@#$%^&*()_+-=[]{}|;:,.<>?',
    '# Heading\n\n- item 1\n- item 2\n\n**bold** _it_', '| a | b |\n|---|---|\n| 1 | 2 |',
    '\\begin{equation} E = mc^2 \\end{equation}', 'regex: ^\\s*(\\d+)\\s*$',
    # Special-token strings inside text.
    '<|begin_of_text|>', '<|end_of_text|>', '<|eot_id|>', '<|start_header_id|>user<|end_header_id|>',
    'Hello<|eot_id|>world', 'Hello <|eot_id|> world', ' <|eot_id|> ', '<|eot_id|><|eot_id|>',
    '<|im_start|>user\nhi<|im_end|>', '<|im_start|>', '<|im_end|>', '<|endoftext|>',
    '<think>reasoning</think>answer', '<tool_call>{"a":1}</tool_call>', '<|im_start|>system\n',
    '<|reserved_special_token_0|>', '<|reserved_special_token_250|>', '<|reserved_special_token_251|>',
    '<|not_a_token|>', '<||>', '<|', '|>', '< |eot_id| >', '<|EOT_ID|>', 'x<|eot_id|>y<|eom_id|>z',
    '<|python_tag|>print(1)<|eom_id|>', '<|finetune_right_pad_id|>', '<|vision_start|><|image_pad|>',
    '<|fim_prefix|>a<|fim_suffix|>b<|fim_middle|>', '<|box_start|>(1,2)<|box_end|>',
    # Mixed and long.
    'The llama (/ˈlɑːmə/; 🦙Spanish pronunciation: [ˈʎama]) (Lama glama) is a domesticated South American camelid.',
    'Mixed 中文 and English and русский and العربية in one line 123 🦙!',
    'Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore et dolore magna aliqua.',
    'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa',
    '================================================================',
    '----------------------------------------', '________________', '!!!!!!!!!!!!????????',
    'ababababababababababab', 'the the the the the the', 'Supercalifragilisticexpialidocious',
    'pneumonoultramicroscopicsilicovolcanoconiosis', 'Antidisestablishmentarianism',
    "I can't believe it's not butter ! Really ? Yes , really .", 'Hello , world . Is it ? Yes !',
    "Do n't go . He 's here . I 'm fine . We 've won . They 're late .",
    '\u0000 null and \u0001 controls \u007f', 'bell\u0007 and escape\u001b[0m', '\ufeffBOM at start',
    'replacement \ufffd char', 'private use \ue000\uf8ff', 'noncharacter \ufdd0',
]


def _generated():
    """Families of strings, so that the set covers many shapes systematically."""
    out = []
    for n in range(1, 13):
        out += ["9" * n, " " + "5" * n]
    for n in range(1, 9):
        out += [" " * n + "x", "x" + " " * n + "y", "\n" * n + " ", "\t" * n + "\n"]
    for word in ["token", "Token", "TOKEN", "tokenizer", "tokenization", "détokenisation", "токенизатор", "トークン"]:
        out += [word, " " + word, word + ".", f'"{word}"', f"({word})", f"{word}'s", f"{word}123"]
    for emoji in ["🦙", "😀", "👍🏽", "🇯🇵", "👨\u200d👩\u200d👧"]:
        out += [emoji * 3, f"a{emoji}b", f" {emoji} ", f"{emoji}\n"]
    for punct in [".", ",", "!", "?", ":", ";", "...", "—", '"', "'"]:
        out += [f"word{punct} next", f"word {punct}next"]
    return out


# In order, each string once.
FIXTURE_STRINGS = list(dict.fromkeys(_HAND_WRITTEN + _generated()))

# Characters whose class differs between regex engines, Unicode versions or libraries: checked
# like the strings above but not learned from (the hand-made tokenizers' merges come from
# FIXTURE_STRINGS alone).
EDGE_STRINGS = [
    # Space or not: U+180E left the spaces in Unicode 6.3; U+0085 is one; U+001C-U+001F and the
    # zero-width characters are not.
    "a\u180eb", "a \u180eb", "\u180ex", "x\u180e", "a\u0085b", "line\u0085next", "a\u001cb\u001fc",
    "zero\u200bwidth\u200cnon\u200djoiner\u2060", "a\u3000\u3000b", "\u2028\u2029", " \u00a0 \u202f ",
    # Marks alone or first (normalizers may remove them all).
    "\u0301", "\u0301\u0345", "\u0903", "\u20dd", " \u0301x", "\u0301abc",
    # Numbers that are not decimal digits, alphabetic characters that are not letters, connector
    # punctuation.
    "a\u2460b", "x\u00b2y", "\u00bd\u2153", "\u0663\u0664x", "\U0001d7ce\U0001d7cf", "\u24b6\u24b7b",
    "\u2160\u2161x", "a\u203fb", "\u00aa\u02b0\u3005",
    # Unassigned, noncharacters, private use, format characters.
    "\u0378 unassigned", "\ufdd0\ufdef", "\ue000 private", "\U000f0000", "\u2065", "soft\u00adhyphen",
    "\u0600\u0601", "tag \U000e0001\U000e0041",
    # CJK extensions (BERT pads ideographs with spaces; Hugging Face's ranges skip U+2B820-U+2B91F).
    "\U0002b820\U0002b91f\U0002b920", "\U0002a6e0", "\U00030000",
    # ASCII symbols (punctuation to Hugging Face's Punctuation and BertPreTokenizer) and apostrophes.
    "a<b>c$d+e=f^g`h|i~j", "he’s", "HE'S", "she'LL",
]

# Conversations for the chat templates. "only" names the tokenizers a conversation is meant for
# (the others' templates do not know its features); "kwargs" are extra template variables.
CONVERSATIONS = [
    {
        "name": "single user",
        "messages": [{"role": "user", "content": "Hello!"}],
    },
    {
        "name": "system and user",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
    },
    {
        "name": "multi-turn",
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello. What do you need?"},
            {"role": "user", "content": "Count to three."},
            {"role": "assistant", "content": "1, 2, 3."},
            {"role": "user", "content": "Thanks"},
        ],
    },
    {
        "name": "unicode",
        "messages": [
            {"role": "user", "content": "Traduis: 你好，世界 🦙 — «привет» ¿qué tal? مرحبا"},
            {"role": "assistant", "content": 'Hello, world 🦙 — "hi" how are you? hello'},
        ],
    },
    {
        "name": "whitespace to trim",
        "messages": [
            {"role": "system", "content": "  \n  padded system prompt\n\n "},
            {"role": "user", "content": "\tpadded user message   \n"},
        ],
    },
    {
        "name": "empty content",
        "messages": [
            {"role": "user", "content": ""},
            {"role": "assistant", "content": ""},
        ],
    },
    {
        "name": "special token text in content",
        "messages": [
            {"role": "user", "content": "Repeat: <|eot_id|> <|im_end|> <think>"},
            {"role": "assistant", "content": "I see <|im_start|> and <|start_header_id|>."},
        ],
    },
    {
        "name": "multi-line code",
        "messages": [
            {"role": "user", "content": "Fix this:\n```python\ndef f(x):\n    return x*2\n```"},
            {"role": "assistant", "content": "Looks fine:\n\n```python\ndef f(x):\n    return x * 2\n```\n"},
            {"role": "user", "content": "And in C?"},
        ],
    },
    {
        "name": "assistant with thinking",
        "messages": [
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "<think>\nAdd two and two.\n</think>\n\n4"},
            {"role": "user", "content": "And 3+3?"},
            {"role": "assistant", "content": "<think>\nThree plus three.\n</think>\n\n6"},
        ],
    },
    {
        "name": "reasoning content field",
        "messages": [
            {"role": "user", "content": "Why is the sky blue?"},
            {"role": "assistant", "content": "Rayleigh scattering.", "reasoning_content": "Short answer wanted."},
        ],
    },
    {
        "name": "reasoning under other names",
        "messages": [
            {"role": "user", "content": "Why is the sky blue?"},
            {"role": "assistant", "content": "Rayleigh scattering.", "reasoning": "Short answer wanted."},
            {"role": "user", "content": "And sunsets?"},
            {"role": "assistant", "content": "A longer path.", "thinking": "Same physics.", "reasoning_content": None},
        ],
    },
    {
        "name": "system only",
        "messages": [{"role": "system", "content": "System prompt only."}],
    },
    {
        "name": "thinking disabled",
        "messages": [{"role": "user", "content": "Quick answer please."}],
        "kwargs": {"enable_thinking": False},
    },
    {
        "name": "tools",
        "only": ["qwen3"],
        "messages": [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
                ],
            },
            {"role": "tool", "content": '{"temperature": 21, "sky": "clear"}'},
            {"role": "tool", "content": '{"humidity": 40}'},
            {"role": "assistant", "content": "It is 21 °C and clear in Paris."},
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city — «météo»",
                    "parameters": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                        "required": ["city"],
                    },
                },
            }
        ],
    },
    {
        "name": "tool call with string arguments",
        "only": ["qwen3"],
        "messages": [
            {"role": "user", "content": "Search for llamas"},
            {"role": "assistant", "content": "Searching.", "tool_calls": [{"function": {"name": "search", "arguments": '{"q": "llamas"}'}}]},
            {"role": "tool", "content": "<tool_response>ignored wrapper</tool_response>"},
        ],
    },
    {
        # Qwen3's template reads message.content, which transformers leaves undefined here: an
        # error there (and in prism), so this case is for the Llama templates.
        "name": "null content with tool calls",
        "only": ["llama3", "llama3_1"],
        "messages": [
            {"role": "user", "content": "Search for llamas"},
            {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "search", "arguments": {"q": "llamas"}}}]},
            {"role": "tool", "content": "Llamas are camelids."},
        ],
    },
]
