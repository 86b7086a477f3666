#!/usr/bin/env python3
"""Every function in include/ is a readable step: at most LIMIT lines, signature to closing brace.

    python3 tools/check_function_length.py [--limit N] [--top K] [files...]
    python3 tools/check_function_length.py --self-test

Prints each function over the limit (`file:line name lines`) and exits 1 if there is one;
--top K lists the K longest instead (exit 0). Comments, string and character literals are
blanked first, so braces inside them do not count. A brace opens a function body when it
follows a declarator (`...) const {`, `...) : member_(x) {`) at namespace or class scope;
lambdas and local classes count toward the function around them. Parentheses are tracked: a
brace inside a parameter list (`f(const options& o = {})`) belongs to the signature. --self-test
checks the scanner on made-up code (a ctest runs it).
"""
import argparse
import pathlib
import re
import sys

LIMIT = 80


def blank(text):
    """The text with comments and literals replaced by spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == 'R' and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            d = text.find("(", i + 2)
            delim = ")" + text[i + 2:d] + '"'
            j = text.find(delim, d)
            j = n if j < 0 else j + len(delim)
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c in "\"'":
            # a digit separator (1'000) is not a character literal
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum() \
                    and not re.match(r".*\b[uUL]?$|.*u8$", text[max(0, i - 2):i]):
                out.append(c); i += 1; continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


SCOPE_WORDS = re.compile(r"\b(namespace|class|struct|union|enum)\b")
NAME = re.compile(r"([~\w]+|operator\s*[^\s(]+)\s*\($")


def is_function_header(h):
    h = h.strip()
    if not h or "(" not in h:
        return None
    depth, first_paren = 0, None
    for k, ch in enumerate(h):
        if ch in "(<[":
            if ch == "(" and depth == 0 and first_paren is None:
                first_paren = k
            depth += 1 if ch == "(" else 0
        elif ch == ")":
            depth -= 1
        elif ch == "=" and depth == 0 and "operator" not in h[max(0, k - 10):k] \
                and h[k - 1:k + 1] not in ("==", "<=", ">=", "!=") and h[k:k + 2] != "==":
            return None  # a variable's initializer
    if first_paren is None:  # every "(" sits inside a bracket: no function header
        return None
    head = h[:first_paren]
    if SCOPE_WORDS.search(re.sub(r"template\s*<.*?>", "", head)) and "operator" not in head:
        return None
    m = NAME.search(h[:first_paren + 1])
    return m.group(1) if m else None


def functions(path):
    text = blank(path.read_text())
    stack = []  # 'scope' or ('func', name, start_line)
    header_start = 0
    parens = 0  # depth of ( ) outside function bodies: a brace there is a braced default argument
    line_of = lambda pos: text.count("\n", 0, pos) + 1
    for pos, ch in enumerate(text):
        if ch in "()":
            if not any(isinstance(s, tuple) for s in stack):
                parens = max(0, parens + (1 if ch == "(" else -1))
        elif ch in ";{}":
            in_func = any(isinstance(s, tuple) for s in stack)
            if parens > 0 and not in_func:
                continue  # `f(const options& o = {})`: part of the signature
            if ch == "{":
                if in_func:
                    stack.append("block")
                else:
                    h = text[header_start:pos]
                    name = is_function_header(h)
                    if name:
                        # the signature starts after any `template <...>` / `requires` lines
                        lines = h.split("\n")
                        skip = 0
                        while skip < len(lines) - 1 and (not lines[skip].strip() or re.match(
                                r"\s*(template\b|requires\b|\[\[|(public|private|protected)\s*:\s*$)", lines[skip])):
                            skip += 1
                        start = line_of(header_start) + skip
                        stack.append(("func", name, start))
                    else:
                        stack.append("scope")
            elif ch == "}":
                top = stack.pop() if stack else None
                if isinstance(top, tuple):
                    yield top[1], top[2], line_of(pos) - top[2] + 1
            header_start = pos + 1


SELF_TEST = """
namespace n {
struct options { int k = 0; };
int counter{3};
// a braced default argument, then a body of 85 lines
inline int long_one(const options& o = {}, std::vector<int> v = {1, 2}) {
""" + "  ++counter;\n" * 85 + """  return o.k;
}
class c {
 public:
  int member(options o = {}) const { if (o.k) { return 1; } return 2; }
  template <class F>
  void visit(F&& f, int depth = int{0}) {
    for (int i = 0; i < depth; ++i) {
      f(i);
    }
  }
};
}  // namespace n
"""


def self_test():
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".hpp", delete=False) as f:
        f.write(SELF_TEST)
    got = {name: n for name, _, n in functions(pathlib.Path(f.name))}
    pathlib.Path(f.name).unlink()
    want = {"long_one": 88, "member": 1, "visit": 5}
    if got != want:
        print(f"self-test: found {got}, want {want}")
        return 1
    print("self-test: functions with braced default arguments are measured whole")
    return 0


def run_check(measure, limit, what, advice, self_test):
    """The command line both size checks share: `measure(path)` yields (name, line, lines) of
    each `what` (functions, classes) in a file; over `limit` lines is an error with `advice`."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--limit", type=int, default=limit)
    ap.add_argument("--top", type=int, default=0)
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    root = pathlib.Path(__file__).resolve().parent.parent
    files = [pathlib.Path(f) for f in a.files] or sorted((root / "include").rglob("*.hpp"))
    found = []
    for f in files:
        for name, line, n in measure(f):
            rel = f.resolve().relative_to(root) if f.resolve().is_relative_to(root) else f
            found.append((n, f"{rel}:{line}", name))
    if a.top:
        for n, where, name in sorted(found, reverse=True)[:a.top]:
            print(f"{where} {name} {n}")
        return 0
    over = sorted((x for x in found if x[0] > a.limit), reverse=True)
    for n, where, name in over:
        print(f"{where} {name}: {n} lines (limit {a.limit}; {advice})")
    print(f"{len(found)} {what}, {len(over)} over {a.limit} lines", file=sys.stderr)
    return 1 if over else 0


def main():
    return run_check(functions, LIMIT, "functions", "split it into named steps", self_test)

if __name__ == "__main__":
    sys.exit(main())
