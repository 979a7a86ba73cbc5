"""Twenty cells that do not compile.

Twenty cells that do not compile. The line the error belongs to ends with ``//!``; ``HEADER`` cells
are saved with ``--save`` first (their error line is marked the same way, in the header).
"""

CASES = {
    "undefined-identifier": (
        '#include <cstdio>\nint main() {\n  int y = x; //!\n  printf("%d\\n", y);\n}\n',
        None,
    ),
    "missing-semicolon-same-line": ("int main() {\n  int a = 1 } //!\n", None),
    "undefined-function": ("int main() {\n  return frobnicate(3); //!\n}\n", None),
    "too-many-arguments": (
        "int twice(int v) { return 2 * v; }\nint main() {\n  return twice(1, 2); //!\n}\n",
        None,
    ),
    "bad-conversion": ("int main() {\n  int *p = 1.5; //!\n  return 0;\n}\n", None),
    "template-no-matching-overload": (
        '#include <vector>\nint main() {\n  std::vector<int> v;\n  v.push_back("text"); //!\n}\n',
        None,
    ),
    "template-static-assert": (
        'template <int N> struct Box {\n  static_assert(N > 0, "N must be positive"); //!\n};\n'
        "int main() {\n  Box<0> b;\n  (void)b;\n}\n",
        None,
    ),
    "global-returns-int": ("__global__ int kernel() { return 0; } //!\nint main() {}\n", None),
    "host-call-from-kernel": (
        "int host_only() { return 1; }\n__global__ void k(int *out) {\n  *out = host_only(); "
        "//!\n}\n"
        "int main() {}\n",
        None,
    ),
    "device-call-from-host": (
        "__device__ int dev_only() { return 1; }\nint main() {\n  return dev_only(); //!\n}\n",
        None,
    ),
    "undefined-in-kernel": (
        "__global__ void k(float *a) {\n  a[threadIdx.x] = b; //!\n}\nint main() {}\n",
        None,
    ),
    "launch-wrong-arguments": (
        "__global__ void k(float *a) { a[0] = 1; }\nint main() {\n  k<<<1, 1>>>(1, 2); //!\n}\n",
        None,
    ),
    "shared-initializer": (
        "__global__ void k(float *a) {\n  __shared__ float tile[4] = {0}; //!\n  a[0] = "
        "tile[0];\n}\n"
        "int main() {}\n",
        None,
    ),
    "redefinition": ("int main() {\n  int n = 1;\n  int n = 2; //!\n  return n;\n}\n", None),
    "last-line-without-newline": ("int main() {\n  return nope; } //!", None),
    "after-comment-with-braces": (
        '/* a comment { with } braces\n   over two lines */\nconst char *s = "} {";\nint main() {\n'
        "  return s + ; //!\n}\n",
        None,
    ),
    "host-preprocessor-error-directive": (
        "#include <cstdio>\n#error this cell is not finished //!\nint main() {}\n",
        None,
    ),
    "host-preprocessor-missing-include": (
        "#include <no_such_header_cudamagic.h> //!\nint main() {}\n",
        None,
    ),
    "header-undefined-identifier": (
        '#include "vec.cuh"\nint main() { return add(1, 2); }\n',
        "// vector helpers\ninline int add(int a, int b) {\n  return a + b + missing; //!\n}\n",
    ),
    "header-template-error-from-cell": (
        '#include "tmpl.cuh"\nint main() {\n  return first_of(3);\n}\n',
        "template <class T>\nint first_of(T v) {\n  return v.front(); //!\n}\n",
    ),
}


def expected(text: str) -> int:
    """1-based line of the ``//!`` mark in a cell body, the ``%%cuda`` line being line 1."""
    return (
        next(
            i for i, line in enumerate(text.splitlines(), start=1) if line.rstrip().endswith("//!")
        )
        + 1
    )
