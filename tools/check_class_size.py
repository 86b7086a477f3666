#!/usr/bin/env python3
"""Every class in include/ fits in one reading: at most LIMIT lines, `class x {` to its `};`.

    python3 tools/check_class_size.py [--limit N] [--top K] [files...]
    python3 tools/check_class_size.py --self-test

Prints each class or struct over the limit (`file:line name lines`) and exits 1 if there is one;
--top K lists the K largest instead (exit 0), the report beside tools/check_function_length.py.
Comments and literals are blanked first (with that tool's scanner); a class nested in another
counts toward both. --self-test checks the scanner on made-up code (a ctest runs it).
"""
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from check_function_length import blank, run_check  # noqa: E402

LIMIT = 700
CLASS_HEAD = re.compile(r"\b(class|struct|union)\s+(?:\[\[[^\]]*\]\]\s*)?(?:alignas\([^)]*\)\s*)?(\w+)[^;()]*$")


def without_template_heads(head):
    """`head` with every `template <...>` blanked (its angle brackets balanced), same length."""
    out = list(head)
    for m in re.finditer(r"\btemplate\s*<", head):
        depth, k = 0, m.end() - 1
        while k < len(head):
            depth += {"<": 1, ">": -1}.get(head[k], 0)
            k += 1
            if depth == 0:
                break
        for j in range(m.start(), k):
            if out[j] != "\n":
                out[j] = " "
    return "".join(out)


def classes(path):
    """(name, first line, lines) of every class or struct defined in `path`."""
    text = blank(path.read_text())
    stack = []  # ('class', name, start_line) or 'other'
    header_start = 0
    line_of = lambda pos: text.count("\n", 0, pos) + 1
    for pos, ch in enumerate(text):
        if ch not in ";{}":
            continue
        if ch == "{":
            head = without_template_heads(text[header_start:pos])
            m = CLASS_HEAD.search(head)
            if m and not re.search(r"\benum\s+(class|struct)\b", head):
                stack.append(("class", m.group(2), line_of(header_start + m.start())))
            else:
                stack.append("other")
        elif ch == "}":
            top = stack.pop() if stack else None
            if isinstance(top, tuple):
                yield top[1], top[2], line_of(pos) - top[2] + 1
        header_start = pos + 1


SELF_TEST = """
namespace n {
enum class kind { a, b };
template <class T>
class big : public base<T> {
 public:
  struct inner {
    int x = 0;
  };
""" + "  int f(int x) { return x + 1; }\n" * 20 + """};
struct [[nodiscard]] small { int y{2}; };
}  // namespace n
"""


def self_test():
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".hpp", delete=False) as f:
        f.write(SELF_TEST)
    got = {name: n for name, _, n in classes(pathlib.Path(f.name))}
    pathlib.Path(f.name).unlink()
    want = {"inner": 3, "big": 26, "small": 1}
    if got != want:
        print(f"self-test: found {got}, want {want}")
        return 1
    print("self-test: classes are measured from their head to their closing brace")
    return 0


def main():
    return run_check(classes, LIMIT, "classes", "split it along its seams", self_test)

if __name__ == "__main__":
    sys.exit(main())
