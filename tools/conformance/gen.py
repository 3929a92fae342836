#!/usr/bin/env python3
"""Generate ferroverbs' header-conformance fixtures from the headers Debian ships.

Usage:
    gen.py --out DIR        write the six fixture files into DIR
    gen.py --selftest       cross-check this script's C layout engine and constant
                            evaluator against gcc on every header it parses

Sources (located automatically, the newest kernel headers are used):
    /usr/include/infiniband/mlx5dv.h                         (libibverbs-dev)
    /usr/src/linux-headers-*-common/include/linux/mlx5/      (linux-headers-*-common)
        mlx5_ifc.h (+ mlx5_ifc_fpga.h, which it includes), device.h, qp.h, cq.h,
        doorbell.h

Outputs (line formats, decimal numbers, `#` lines are comments):
    mlx5_ifc.txt   layout <struct> <size_bits>
                   field <struct> <field> <bit> <width>
                   flex <struct> <field> <element_width>   (flexible array: width 0)
                   const <NAME> <value>
    device.txt, qp.txt, cq.txt, doorbell.txt, mlx5dv.txt
                   struct <name> <size>
                   member <struct> <member> <offset> <size>
                   const <NAME> <value>
                   bytes <vector> <hex>                     (mlx5dv.txt only)

The PRM layouts (mlx5_ifc.h) and the kernel's byte structs and constants are computed
by the parser and layout engine in this file; the mlx5dv.h values are measured by a C
program compiled with gcc against the installed header. `--selftest` compiles every
kernel header structure and constant, and the whole of mlx5_ifc.h, with gcc and
compares the results with the engine's, and runs the engine on the mlx5dv.h
structures too, so that both ways of measuring agree.

Constants are printed as unsigned numbers: a value of C type `int` (every enum
constant that fits, and unsuffixed literals) as its 32-bit two's complement, wider
types as 64-bit. Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import bisect
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Callable, Optional

MLX5DV_H = "/usr/include/infiniband/mlx5dv.h"
KERNEL_GLOB = "/usr/src/linux-headers-*-common"
KERNEL_SUBDIR = "include/linux/mlx5"
KERNEL_FILES = ["mlx5_ifc.h", "device.h", "qp.h", "cq.h", "doorbell.h"]
FIXTURES = ["mlx5_ifc.txt", "device.txt", "qp.txt", "cq.txt", "doorbell.txt", "mlx5dv.txt"]


class GenError(Exception):
    """A fatal, user-facing error."""


class Unsupported(Exception):
    """Something the engine does not evaluate (the item is skipped)."""


# --------------------------------------------------------------------------------------
# Locating the sources
# --------------------------------------------------------------------------------------


def version_key(s: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s)]


def find_kernel_dir(override: Optional[str]) -> str:
    if override:
        d = override
    else:
        roots = sorted(glob.glob(KERNEL_GLOB), key=version_key)
        roots = [r for r in roots if os.path.isdir(os.path.join(r, KERNEL_SUBDIR))]
        if not roots:
            raise GenError(
                "no /usr/src/linux-headers-*-common/include/linux/mlx5 found: install the "
                "Debian package linux-headers-<version>-common (e.g. `apt-get install "
                "linux-headers-6.1.0-NN-common`, the newest 6.1 one)"
            )
        d = os.path.join(roots[-1], KERNEL_SUBDIR)
    for f in KERNEL_FILES + ["mlx5_ifc_fpga.h"]:
        if not os.path.isfile(os.path.join(d, f)):
            raise GenError(f"{d}/{f} is missing: reinstall linux-headers-<version>-common")
    return d


def find_mlx5dv(override: Optional[str]) -> str:
    p = override or MLX5DV_H
    if not os.path.isfile(p):
        raise GenError(f"{p} not found: install the Debian package libibverbs-dev")
    return p


def need_gcc() -> str:
    gcc = shutil.which("gcc")
    if not gcc:
        raise GenError("gcc not found: install the Debian packages gcc and libc6-dev")
    return gcc


def package_of(path: str) -> str:
    """`package version` of the Debian package that ships `path` (dpkg-query)."""
    try:
        out = subprocess.run(
            ["dpkg-query", "-S", os.path.realpath(path)],
            capture_output=True, text=True, check=True,
        ).stdout
        pkg = out.split(":")[0].strip()
        ver = subprocess.run(
            ["dpkg-query", "-W", "-f=${Version}", pkg],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        return f"{pkg} {ver}"
    except (OSError, subprocess.CalledProcessError):
        return "package unknown (dpkg-query failed)"


# --------------------------------------------------------------------------------------
# Preprocessing: comments, continuations, conditionals, #defines
# --------------------------------------------------------------------------------------

# Macros taken as defined when evaluating #if (x86-64 Linux, gcc, -mssse3); anything
# else is undefined, as in C.
PREDEFINED = {
    "__LITTLE_ENDIAN": 1234,
    "BITS_PER_LONG": 64,
    "__GNUC__": 12,
    "__x86_64__": 1,
    "__SSE3__": 1,
    "__SSSE3__": 1,
    "CHAR_MIN": -128,
}


@dataclass
class Define:
    name: str
    params: Optional[list]
    body: str
    line: int


@dataclass
class Source:
    path: str
    text: str  # comments removed, directives and inactive lines blanked
    defines: list  # [Define] in order


def strip_comments(src: str) -> str:
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c == "/" and i + 1 < n and src[i + 1] == "*":
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(" " + "\n" * src.count("\n", i, j))
            i = j
        elif c == "/" and i + 1 < n and src[i + 1] == "/":
            j = src.find("\n", i)
            i = n if j < 0 else j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i : j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def preprocess(path: str) -> Source:
    with open(path, encoding="utf-8", errors="replace") as f:
        raw = strip_comments(f.read())
    # Join continuation lines, keeping the line count.
    lines = raw.split("\n")
    logical = []  # (line_no, text, physical_count)
    i = 0
    while i < len(lines):
        start = i
        text = lines[i]
        while text.endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text[:-1] + " " + lines[i]
        logical.append((start + 1, text, i - start + 1))
        i += 1
    defined: dict = dict(PREDEFINED)
    defines: list = []
    stack: list = []  # (active, taken, parent_active)
    out_lines = []
    for line_no, text, count in logical:
        s = text.strip()
        active = all(a for a, _, _ in stack)
        m = re.match(r"#\s*(\w+)\s*(.*)$", s)
        if m:
            d, rest = m.group(1), m.group(2).strip()
            if d in ("if", "ifdef", "ifndef"):
                if d == "ifdef":
                    v = rest.split()[0] in defined
                elif d == "ifndef":
                    v = rest.split()[0] not in defined
                else:
                    v = eval_pp_condition(rest, defined)
                stack.append((active and v, v, active))
            elif d == "elif":
                _, taken, parent = stack.pop()
                v = (not taken) and eval_pp_condition(rest, defined)
                stack.append((parent and v, taken or v, parent))
            elif d == "else":
                _, taken, parent = stack.pop()
                stack.append((parent and not taken, True, parent))
            elif d == "endif":
                stack.pop()
            elif d == "define" and active:
                dm = re.match(r"(\w+)(\([^)]*\))?\s*(.*)$", rest)
                if dm:
                    params = None
                    if dm.group(2) is not None:
                        params = [p.strip() for p in dm.group(2)[1:-1].split(",") if p.strip()]
                    body = dm.group(3).strip()
                    defines.append(Define(dm.group(1), params, body, line_no))
                    defined[dm.group(1)] = body
            elif d == "undef" and active:
                defined.pop(rest.split()[0], None)
            out_lines.extend([""] * count)
            continue
        if active:
            out_lines.append(text)
            out_lines.extend([""] * (count - 1))
        else:
            out_lines.extend([""] * count)
    return Source(path, "\n".join(out_lines), defines)


def eval_pp_condition(expr: str, defined: dict) -> bool:
    expr = re.sub(r"defined\s*\(\s*(\w+)\s*\)", lambda m: "1" if m.group(1) in defined else "0", expr)
    expr = re.sub(r"defined\s+(\w+)", lambda m: "1" if m.group(1) in defined else "0", expr)

    def ident(name: str):
        v = defined.get(name)
        if isinstance(v, int):
            return CVal(v, INT)
        if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
            return CVal(int(v), INT)
        return CVal(0, INT)  # an undefined identifier is 0 in #if

    try:
        return Evaluator(ident).eval_text(expr).value != 0
    except Unsupported:
        return False


# --------------------------------------------------------------------------------------
# Tokenizer
# --------------------------------------------------------------------------------------

TOKEN_RE = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<num>(?:0[xX][0-9a-fA-F]+|\d+)[uUlL]*)
  | (?P<id>[A-Za-z_]\w*)
  | (?P<str>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
  | (?P<op>\.\.\.|<<=|>>=|<<|>>|<=|>=|==|!=|&&|\|\||->|\#\#|[-+*/%&|^~!<>=?:;,.(){}\[\]\#])
    """,
    re.VERBOSE,
)


@dataclass
class Tok:
    kind: str  # num id str op
    text: str
    pos: int


def tokenize(text: str) -> list:
    toks = []
    i, n = 0, len(text)
    while i < n:
        m = TOKEN_RE.match(text, i)
        if not m:
            toks.append(Tok("op", text[i], i))  # stray character
            i += 1
            continue
        kind = m.lastgroup
        if kind != "ws":
            toks.append(Tok(kind, m.group(), i))
        i = m.end()
    return toks


# --------------------------------------------------------------------------------------
# Integer constant expressions with C typing (x86-64: int 32, long 64)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CType:
    bits: int
    signed: bool


INT = CType(32, True)
UINT = CType(32, False)
LONG = CType(64, True)
ULONG = CType(64, False)
SIZE_T = ULONG

CAST_TYPES = {
    "u8": UINT, "u16": UINT, "u32": UINT, "u64": ULONG,
    "s8": INT, "s16": INT, "s32": INT, "s64": LONG,
    "__u8": UINT, "__u16": UINT, "__u32": UINT, "__u64": ULONG,
    "uint8_t": UINT, "uint16_t": UINT, "uint32_t": UINT, "uint64_t": ULONG,
    "int8_t": INT, "int16_t": INT, "int32_t": INT, "int64_t": LONG,
    "size_t": ULONG, "int": INT, "unsigned": UINT, "long": LONG,
}
# Width of the narrow cast types (the value is truncated, then promoted to int).
CAST_NARROW = {
    "u8": 8, "__u8": 8, "uint8_t": 8, "u16": 16, "__u16": 16, "uint16_t": 16,
    "s8": -8, "int8_t": -8, "s16": -16, "int16_t": -16,
}


@dataclass(frozen=True)
class CVal:
    value: int
    ctype: CType

    def wrapped(self) -> "CVal":
        return CVal(wrap(self.value, self.ctype), self.ctype)

    def unsigned(self) -> int:
        return self.value % (1 << self.ctype.bits)


def wrap(v: int, t: CType) -> int:
    v %= 1 << t.bits
    if t.signed and v >= 1 << (t.bits - 1):
        v -= 1 << t.bits
    return v


def literal(text: str) -> CVal:
    m = re.fullmatch(r"(0[xX][0-9a-fA-F]+|\d+)([uUlL]*)", text)
    if not m:
        raise Unsupported(text)
    digits, suffix = m.group(1), m.group(2).lower()
    if digits.lower().startswith("0x"):
        v, is_dec = int(digits, 16), False
    elif len(digits) > 1 and digits.startswith("0"):
        v, is_dec = int(digits, 8), False
    else:
        v, is_dec = int(digits), True
    uns = "u" in suffix
    lng = "l" in suffix
    cands = []
    if not lng:
        cands += [UINT] if uns else ([INT] if is_dec else [INT, UINT])
    cands += [ULONG] if uns else ([LONG] if is_dec else [LONG, ULONG])
    for t in cands:
        lim = 1 << (t.bits - 1 if t.signed else t.bits)
        if v < lim:
            return CVal(v, t)
    return CVal(v, ULONG)


def promote(t: CType) -> CType:
    return t if t.bits >= 32 else INT


def common(a: CType, b: CType) -> CType:
    if a == b:
        return a
    if a.bits == b.bits:
        return CType(a.bits, False)
    big, small = (a, b) if a.bits > b.bits else (b, a)
    if big.signed and not small.signed and big.bits > small.bits:
        return big
    return big


class Evaluator:
    """Evaluates C integer constant expressions given an identifier resolver."""

    def __init__(self, ident: Callable[[str], CVal],
                 funcs: Optional[dict] = None,
                 macro_tokens: Optional[Callable[[str], Optional[list]]] = None):
        self.ident = ident
        self.funcs = funcs or {}
        self.macro_tokens = macro_tokens
        self.toks: list = []
        self.i = 0

    def eval_text(self, text: str) -> CVal:
        return self.eval_tokens(tokenize(text))

    def eval_tokens(self, toks: list) -> CVal:
        self.toks = self.expand(toks, set())
        self.i = 0
        if not self.toks:
            raise Unsupported("empty expression")
        v = self.ternary()
        if self.i != len(self.toks):
            raise Unsupported("trailing tokens: " + " ".join(t.text for t in self.toks[self.i:]))
        return v

    def expand(self, toks: list, seen: set) -> list:
        """Substitutes object-like macros (textually, with a recursion guard)."""
        if not self.macro_tokens:
            return toks
        out = []
        for k, t in enumerate(toks):
            is_call = k + 1 < len(toks) and toks[k + 1].text == "("
            if t.kind == "id" and t.text not in seen and not is_call:
                body = self.macro_tokens(t.text)
                if body is not None:
                    out += self.expand(body, seen | {t.text})
                    continue
            out.append(t)
        return out

    def peek(self, off: int = 0) -> Optional[str]:
        j = self.i + off
        return self.toks[j].text if j < len(self.toks) else None

    def take(self, text: Optional[str] = None) -> Tok:
        if self.i >= len(self.toks):
            raise Unsupported("unexpected end")
        t = self.toks[self.i]
        if text is not None and t.text != text:
            raise Unsupported(f"expected {text}, got {t.text}")
        self.i += 1
        return t

    def ternary(self) -> CVal:
        c = self.binary(0)
        if self.peek() == "?":
            self.take("?")
            a = self.ternary()
            self.take(":")
            b = self.ternary()
            t = common(promote(a.ctype), promote(b.ctype))
            return CVal(a.value if c.value else b.value, t).wrapped()
        return c

    PREC = [
        ["||"], ["&&"], ["|"], ["^"], ["&"], ["==", "!="], ["<", ">", "<=", ">="],
        ["<<", ">>"], ["+", "-"], ["*", "/", "%"],
    ]

    def binary(self, level: int) -> CVal:
        if level == len(self.PREC):
            return self.unary()
        lhs = self.binary(level + 1)
        while self.peek() in self.PREC[level]:
            op = self.take().text
            rhs = self.binary(level + 1)
            lhs = self.apply(op, lhs, rhs)
        return lhs

    def apply(self, op: str, a: CVal, b: CVal) -> CVal:
        if op in ("<<", ">>"):
            t = promote(a.ctype)
            if b.value < 0 or b.value >= t.bits:
                raise Unsupported("shift out of range")
            av = wrap(a.value, t)
            if op == "<<":
                if av < 0:
                    raise Unsupported("shift of a negative value")
                return CVal(av << b.value, t).wrapped()
            return CVal(av >> b.value, t).wrapped()
        if op in ("&&", "||"):
            r = (a.value != 0 and b.value != 0) if op == "&&" else (a.value != 0 or b.value != 0)
            return CVal(int(r), INT)
        t = common(promote(a.ctype), promote(b.ctype))
        x, y = wrap(a.value, t), wrap(b.value, t)
        if op == "+":
            r = x + y
        elif op == "-":
            r = x - y
        elif op == "*":
            r = x * y
        elif op in ("/", "%"):
            if y == 0:
                raise Unsupported("division by zero")
            q = abs(x) // abs(y)
            if (x < 0) != (y < 0):
                q = -q
            r = q if op == "/" else x - q * y
        elif op == "&":
            r = x & y
        elif op == "|":
            r = x | y
        elif op == "^":
            r = x ^ y
        else:
            r = {"==": x == y, "!=": x != y, "<": x < y, ">": x > y, "<=": x <= y, ">=": x >= y}[op]
            return CVal(int(r), INT)
        return CVal(r, t).wrapped()

    def unary(self) -> CVal:
        p = self.peek()
        if p in ("-", "+", "~", "!"):
            self.take()
            v = self.unary()
            t = promote(v.ctype)
            if p == "-":
                return CVal(-v.value, t).wrapped()
            if p == "+":
                return CVal(v.value, t).wrapped()
            if p == "~":
                return CVal(~v.value, t).wrapped()
            return CVal(int(v.value == 0), INT)
        if p == "(" and self.is_cast():
            self.take("(")
            words = []
            while self.peek() != ")":
                words.append(self.take().text)
            self.take(")")
            v = self.unary()
            return self.cast(words, v)
        return self.primary()

    def is_cast(self) -> bool:
        j = 1
        words = []
        while self.peek(j) not in (None, ")"):
            words.append(self.peek(j))
            j += 1
        if not words:
            return False
        return all(w in CAST_TYPES or w in ("unsigned", "signed", "long", "int", "short", "char")
                   for w in words)

    def cast(self, words: list, v: CVal) -> CVal:
        key = " ".join(words)
        if len(words) == 1 and words[0] in CAST_NARROW:
            w = CAST_NARROW[words[0]]
            t = CType(abs(w), w < 0)
            return CVal(wrap(v.value, t), INT)
        if len(words) == 1 and words[0] in CAST_TYPES:
            return CVal(v.value, CAST_TYPES[words[0]]).wrapped()
        signed = "unsigned" not in words
        if "long" in words:
            t = CType(64, signed)
        elif "char" in words:
            return CVal(wrap(v.value, CType(8, signed)), INT)
        elif "short" in words:
            return CVal(wrap(v.value, CType(16, signed)), INT)
        else:
            t = CType(32, signed)
        if not words or key == "":
            raise Unsupported("cast")
        return CVal(v.value, t).wrapped()

    def primary(self) -> CVal:
        t = self.take()
        if t.kind == "num":
            return literal(t.text)
        if t.text == "(":
            v = self.ternary()
            self.take(")")
            return v
        if t.kind == "id":
            if self.peek() == "(":
                f = self.funcs.get(t.text)
                if f is None:
                    raise Unsupported(f"call of {t.text}")
                self.take("(")
                args = []
                depth = 0
                cur: list = []
                while True:
                    x = self.take()
                    if x.text == "(":
                        depth += 1
                    elif x.text == ")":
                        if depth == 0:
                            break
                        depth -= 1
                    if x.text == "," and depth == 0:
                        args.append(cur)
                        cur = []
                        continue
                    cur.append(x)
                args.append(cur)
                return f(self, args)
            return self.ident(t.text)
        raise Unsupported(f"token {t.text}")


# --------------------------------------------------------------------------------------
# C declarations: parser
# --------------------------------------------------------------------------------------

BASE_TYPES_C = {
    # name: (size, align) on x86-64
    "u8": 1, "u16": 2, "u32": 4, "u64": 8, "s8": 1, "s16": 2, "s32": 4, "s64": 8,
    "__u8": 1, "__u16": 2, "__u32": 4, "__u64": 8, "__s8": 1, "__s16": 2, "__s32": 4, "__s64": 8,
    "__be16": 2, "__be32": 4, "__be64": 8, "__le16": 2, "__le32": 4, "__le64": 8,
    "uint8_t": 1, "uint16_t": 2, "uint32_t": 4, "uint64_t": 8,
    "int8_t": 1, "int16_t": 2, "int32_t": 4, "int64_t": 8,
    "char": 1, "signed char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2,
    "int": 4, "unsigned": 4, "unsigned int": 4, "signed int": 4, "long": 8, "unsigned long": 8,
    "long long": 8, "unsigned long long": 8, "bool": 1, "_Bool": 1,
}
TYPE_WORDS = {"unsigned", "signed", "char", "short", "int", "long", "_Bool", "const", "volatile"}
ATTR_WORDS = {"__packed", "__attribute__", "__aligned", "__attribute", "__randomize_layout"}


@dataclass
class Attrs:
    packed: bool = False
    aligned: int = 0


@dataclass
class Agg:
    kind: str  # struct / union
    tag: Optional[str]
    members: list
    attrs: Attrs
    span: tuple = (0, 0)  # source text span of the whole definition (top level)
    nested_tagged: list = field(default_factory=list)  # Agg defined inline with a tag


@dataclass
class Member:
    name: Optional[str]
    type_name: Optional[str] = None  # base type words or "struct X"/"union X"
    inline: Optional[Agg] = None
    pointer: bool = False
    fnptr: bool = False
    dims: list = field(default_factory=list)  # token lists; [] = flexible
    bitwidth: Optional[list] = None
    attrs: Attrs = field(default_factory=Attrs)
    flex_macro: bool = False  # DECLARE_FLEX_ARRAY


@dataclass
class Enumerator:
    name: str
    expr: Optional[list]  # tokens, None = previous + 1
    prev: Optional[str]
    pos: int = 0  # offset of the name in the source text


@dataclass
class Parsed:
    aggs: list  # top-level Agg (with tag) in order, nested tagged ones before their parent
    enums: list  # [Enumerator] in order


def split_depth(toks: list, sep: str) -> list:
    parts, cur, depth = [], [], 0
    for t in toks:
        if t.text in "([{":
            depth += 1
        elif t.text in ")]}":
            depth -= 1
        if t.text == sep and depth == 0:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    return parts


def match_close(toks: list, i: int) -> int:
    """Index of the bracket closing toks[i]."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    open_, close = toks[i].text, pairs[toks[i].text]
    depth = 0
    for j in range(i, len(toks)):
        if toks[j].text == open_:
            depth += 1
        elif toks[j].text == close:
            depth -= 1
            if depth == 0:
                return j
    raise GenError(f"unbalanced {open_} at offset {toks[i].pos}")


def parse_attrs(toks: list, i: int, attrs: Attrs) -> int:
    """Consumes attribute tokens at toks[i:], returns the new index."""
    ev = Evaluator(no_ident)  # alignments are plain numbers
    while i < len(toks):
        t = toks[i].text
        if t == "__packed":
            attrs.packed = True
            i += 1
        elif t == "__aligned" and i + 1 < len(toks) and toks[i + 1].text == "(":
            j = match_close(toks, i + 1)
            attrs.aligned = max(attrs.aligned, eval_int(ev, toks[i + 2 : j]))
            i = j + 1
        elif t in ("__attribute__", "__attribute") and i + 1 < len(toks) and toks[i + 1].text == "(":
            j = match_close(toks, i + 1)
            inner = toks[i + 2 : j]
            if inner and inner[0].text == "(":
                inner = inner[1:-1]
            for item in split_depth(inner, ","):
                if not item:
                    continue
                name = item[0].text.strip("_")
                if name == "packed":
                    attrs.packed = True
                elif name == "aligned":
                    if len(item) > 1:
                        attrs.aligned = max(attrs.aligned, eval_int(ev, item[2:-1]))
                    else:
                        attrs.aligned = max(attrs.aligned, 16)
            i = j + 1
        elif t in ("__randomize_layout",):
            i += 1
        else:
            break
    return i


def no_ident(name: str) -> CVal:
    raise Unsupported(f"identifier {name}")


def eval_int(ev: Optional[Evaluator], toks: list) -> int:
    if ev is None:
        raise Unsupported("no evaluator")
    return ev.eval_tokens(toks).value


def parse_body(toks: list, nested: list) -> list:
    """Parses the member declarations between the braces of a struct/union."""
    members = []
    for decl in split_depth(toks, ";"):
        if not decl:
            continue
        members.extend(parse_decl(decl, nested))
    return members


def parse_decl(decl: list, nested: list) -> list:
    i = 0
    while i < len(decl) and decl[i].text in ("const", "volatile", "__extension__"):
        i += 1
    head = decl[i].text
    if head in ("struct_group", "struct_group_attr", "struct_group_tagged", "__struct_group"):
        j = match_close(decl, i + 1)
        args = split_depth(decl[i + 2 : j], ",")
        if head == "struct_group":
            name, body = args[0], args[1:]
        elif head == "struct_group_attr":
            name, body = args[0], args[2:]
        elif head == "struct_group_tagged":
            name, body = args[1], args[2:]
        else:
            name, body = args[1], args[3:]
        body_toks = [t for part in body for t in part + [Tok("op", ",", 0)]][:-1]
        inner = parse_body(body_toks, nested)
        gname = name[0].text if name else None
        anon = Member(None, inline=Agg("struct", None, inner, Attrs()))
        named = Member(gname, inline=Agg("struct", None, inner, Attrs()))
        return [Member(None, inline=Agg("union", None, [anon, named], Attrs()))]
    if head in ("DECLARE_FLEX_ARRAY", "__DECLARE_FLEX_ARRAY"):
        j = match_close(decl, i + 1)
        args = split_depth(decl[i + 2 : j], ",")
        tname = " ".join(t.text for t in args[0])
        arr = Member(args[1][0].text, type_name=tname, dims=[[]], flex_macro=True)
        return [Member(None, inline=Agg("struct", None, [arr], Attrs()))]
    if head in ("struct", "union", "enum"):
        kind = head
        i += 1
        tag = None
        if i < len(decl) and decl[i].kind == "id" and decl[i].text not in ATTR_WORDS:
            tag = decl[i].text
            i += 1
        type_attrs = Attrs()
        i = parse_attrs(decl, i, type_attrs)
        inline = None
        type_name: Optional[str] = "int" if kind == "enum" else f"{kind} {tag}"
        if i < len(decl) and decl[i].text == "{":
            j = match_close(decl, i)
            if kind != "enum":
                inline = Agg(kind, tag, parse_body(decl[i + 1 : j], nested), type_attrs)
                i = parse_attrs(decl, j + 1, inline.attrs)
                if tag:
                    nested.append(inline)
                else:
                    type_name = None
            else:
                i = j + 1
        rest = decl[i:]
        if not rest:
            if inline is None or tag:
                # A forward or tag-only declaration declares no member.
                return []
            return [Member(None, inline=inline)]
        return [parse_declarator(d, type_name, inline) for d in split_depth(rest, ",")]
    words = []
    while i < len(decl) and decl[i].text in TYPE_WORDS:
        if decl[i].text not in ("const", "volatile"):
            words.append(decl[i].text)
        i += 1
    if not words:
        words = [decl[i].text]
        i += 1
    type_name = " ".join(words)
    return [parse_declarator(d, type_name, None) for d in split_depth(decl[i:], ",")]


def parse_declarator(toks: list, type_name: Optional[str], inline: Optional[Agg]) -> Member:
    m = Member(None, type_name=type_name, inline=inline)
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.text in ("const", "volatile", "__iomem", "__rcu", "__user"):
            i += 1
        elif t.text == "*":
            m.pointer = True
            i += 1
        elif t.text in ATTR_WORDS:
            i = parse_attrs(toks, i, m.attrs)
        elif t.text == "(" and m.name is None:
            j = match_close(toks, i)
            inner = toks[i + 1 : j]
            if inner and inner[0].text == "*":
                m.fnptr = True
                names = [x for x in inner if x.kind == "id"]
                m.name = names[-1].text if names else None
            i = j + 1
            if i < len(toks) and toks[i].text == "(":
                i = match_close(toks, i) + 1
        elif t.text == "(":
            i = match_close(toks, i) + 1  # a function declarator's parameters
            m.fnptr = True
        elif t.text == "[":
            j = match_close(toks, i)
            m.dims.append(toks[i + 1 : j])
            i = j + 1
        elif t.text == ":":
            m.bitwidth = [x for x in toks[i + 1 :] if x.text not in ATTR_WORDS]
            break
        elif t.kind == "id" and m.name is None:
            m.name = t.text
            i += 1
        else:
            i += 1
    return m


def parse_c(src: Source) -> Parsed:
    toks = tokenize(src.text)
    aggs: list = []
    enums: list = []
    i, n = 0, len(toks)
    while i < n:
        t = toks[i].text
        if t in ("struct", "union") and i + 2 < n and toks[i + 1].kind == "id" and toks[i + 2].text == "{":
            start = toks[i].pos
            j = match_close(toks, i + 2)
            nested: list = []
            members = parse_body(toks[i + 3 : j], nested)
            agg = Agg(t, toks[i + 1].text, members, Attrs(), nested_tagged=nested)
            k = parse_attrs(toks, j + 1, agg.attrs)
            while k < n and toks[k].text != ";":
                k += 1
            end = toks[k].pos + 1 if k < n else len(src.text)
            agg.span = (start, end)
            for sub in nested:
                aggs.append(sub)
            aggs.append(agg)
            i = k + 1
        elif t == "enum" and i + 1 < n and (toks[i + 1].text == "{" or (
                toks[i + 1].kind == "id" and i + 2 < n and toks[i + 2].text == "{")):
            b = i + 1 if toks[i + 1].text == "{" else i + 2
            j = match_close(toks, b)
            prev = None
            for part in split_depth(toks[b + 1 : j], ","):
                if not part:
                    continue
                name = part[0].text
                expr = part[2:] if len(part) > 2 and part[1].text == "=" else None
                enums.append(Enumerator(name, expr, prev, part[0].pos))
                prev = name
            i = j + 1
        elif t == "{":
            i = match_close(toks, i) + 1
        else:
            i += 1
    return Parsed(aggs, enums)


# --------------------------------------------------------------------------------------
# Constants
# --------------------------------------------------------------------------------------


@dataclass
class Const:
    name: str
    value: int  # unsigned rendering
    cval: CVal
    c_text: str  # expression for the gcc cross-check
    is_enum: bool


class ConstEnv:
    """Constants of a chain of headers, for evaluation."""

    def __init__(self, funcs: dict, parent: Optional["ConstEnv"] = None):
        self.vals: dict = {} if parent is None else dict(parent.vals)
        self.macros: dict = {} if parent is None else dict(parent.macros)
        self.funcs = funcs

    def evaluator(self) -> Evaluator:
        def ident(name: str) -> CVal:
            if name in self.vals:
                return self.vals[name]
            raise Unsupported(f"unknown identifier {name}")

        def macro(name: str) -> Optional[list]:
            return self.macros.get(name)

        return Evaluator(ident, self.funcs, macro)


def enum_type(v: int) -> CType:
    # gcc: int when it fits, else unsigned int, else long / unsigned long.
    for t in (INT, UINT, LONG, ULONG):
        lo = -(1 << (t.bits - 1)) if t.signed else 0
        hi = (1 << (t.bits - 1 if t.signed else t.bits)) - 1
        if lo <= v <= hi:
            return t
    return ULONG


def collect_consts(src: Source, parsed: Parsed, env: ConstEnv, want_define: Callable[[str], bool]) -> list:
    """Enum members and numeric object-like #defines of one header, in header order."""
    for d in src.defines:
        if d.params is None:
            env.macros.setdefault(d.name, tokenize(d.body))
    starts = [0] + [k + 1 for k, ch in enumerate(src.text) if ch == "\n"]
    seq = [(bisect.bisect_right(starts, e.pos), 1, k, e) for k, e in enumerate(parsed.enums)]
    seq += [(d.line, 0, k, d) for k, d in enumerate(src.defines)]
    seq.sort(key=lambda x: x[:3])
    out = []
    retry = []  # defines using names defined further down (macros expand at their use)
    ev = env.evaluator()
    for order, (_, kind, _, item) in enumerate(seq):
        if kind == 1:
            e: Enumerator = item
            try:
                if e.expr is None:
                    if e.prev is None:
                        v = CVal(0, INT)
                    else:
                        p = env.vals.get(e.prev)
                        if p is None:
                            raise Unsupported("previous enumerator unknown")
                        v = CVal(p.value + 1, p.ctype)
                    c_text = f"({e.prev}) + 1" if e.prev else "0"
                else:
                    v = ev.eval_tokens(e.expr)
                    c_text = " ".join(t.text for t in e.expr)
            except Unsupported:
                continue
            cv = CVal(v.value, enum_type(v.value))
            env.vals[e.name] = cv
            out.append((order, Const(e.name, cv.unsigned(), cv, c_text, True)))
        else:
            d: Define = item
            if d.params is not None or not d.body or not want_define(d.name):
                continue
            if re.search(r"[\"'{};]", d.body):
                continue
            try:
                v = ev.eval_tokens(tokenize(d.body))
            except Unsupported:
                retry.append((order, d))
                continue
            env.vals[d.name] = v
            out.append((order, Const(d.name, v.unsigned(), v, d.body, False)))
    for order, d in retry:
        try:
            v = ev.eval_tokens(tokenize(d.body))
        except Unsupported:
            continue
        env.vals[d.name] = v
        out.append((order, Const(d.name, v.unsigned(), v, d.body, False)))
    out = [c for _, c in sorted(out, key=lambda x: x[0])]
    # A name defined twice (under exclusive conditionals) keeps its first definition.
    seen, uniq = set(), []
    for c in out:
        if c.name not in seen:
            seen.add(c.name)
            uniq.append(c)
    return uniq


# --------------------------------------------------------------------------------------
# Layout engine
# --------------------------------------------------------------------------------------


@dataclass
class Entry:
    path: str
    offset: int  # units: bytes (C) or bits (mlx5_ifc)
    size: int
    flex: bool = False
    elem: int = 0  # element size of a flexible array
    bitfield: bool = False


class Layouter:
    """Computes sizes, alignments and member offsets.

    `base` maps base type names to sizes (alignment = size). For mlx5_ifc.h, `u8` has
    size 1 and the units are bits (each u8 array element is one bit); no alignment
    applies since everything is u8.
    """

    def __init__(self, base: dict, aggs: dict, ev: Optional[Evaluator], bit_units: bool = False):
        self.base = base
        self.aggs = aggs  # "struct tag" -> Agg
        self.ev = ev
        self.cache: dict = {}
        # Bits per unit: 8 for byte layouts, 1 when the units are already bits.
        self.unit = 1 if bit_units else 8

    def type_of(self, m: Member) -> tuple:
        """(size, align, Agg or None) of one element of member m."""
        if m.pointer or m.fnptr:
            raise Unsupported("pointer")
        if m.inline is not None:
            s, a = self.agg_layout(m.inline)[:2]
            return s, a, m.inline
        tn = m.type_name
        if tn in self.base:
            s = self.base[tn]
            return s, s, None
        if tn in self.aggs:
            s, a = self.agg_layout(self.aggs[tn])[:2]
            return s, a, self.aggs[tn]
        raise Unsupported(f"type {tn}")

    def count(self, m: Member) -> tuple:
        """(flexible, elements): a `[]` dimension makes the member flexible; elements
        counts the other dimensions (the size of one element of a flexible array)."""
        flex, n = False, 1
        for d in m.dims:
            if not d:
                flex = True
            else:
                n *= eval_int(self.ev, d)
        return flex, n

    def agg_layout(self, agg: Agg) -> tuple:
        key = id(agg)
        if key in self.cache:
            return self.cache[key]
        packed = agg.attrs.packed
        align = 1
        entries: list = []
        if agg.kind == "struct":
            bitpos = 0  # position in units*8 for C, or units for bit mode
            unit = self.unit
            for m in agg.members:
                s, a, sub = self.type_of(m)
                if m.bitwidth is not None:
                    w = eval_int(self.ev, m.bitwidth)
                    ab = a * unit
                    eff = 1 if packed or m.attrs.packed else ab
                    if w == 0:
                        bitpos = -(-bitpos // ab) * ab
                    else:
                        if not (packed or m.attrs.packed):
                            if bitpos // ab != (bitpos + w - 1) // ab:
                                bitpos = -(-bitpos // ab) * ab
                        if m.name:
                            entries.append(Entry(m.name, bitpos // unit, 0, bitfield=True))
                        bitpos += w
                    if not (packed or m.attrs.packed):
                        align = max(align, a)
                    continue
                a_eff = 1 if (packed or m.attrs.packed) else a
                if m.attrs.aligned:
                    a_eff = max(a_eff, m.attrs.aligned)
                off = -(-bitpos // unit)
                off = -(-off // a_eff) * a_eff
                flex, cnt = self.count(m)
                size = 0 if flex else s * cnt
                self.add_entries(entries, m, sub, off, size, s * cnt, flex)
                bitpos = (off + size) * unit
                align = max(align, a_eff)
            size = -(-bitpos // unit)
        else:
            size = 0
            for m in agg.members:
                s, a, sub = self.type_of(m)
                if m.bitwidth is not None:
                    w = eval_int(self.ev, m.bitwidth)
                    size = max(size, -(-w // self.unit))
                    if not packed:
                        align = max(align, a)
                    continue
                a_eff = 1 if (packed or m.attrs.packed) else a
                if m.attrs.aligned:
                    a_eff = max(a_eff, m.attrs.aligned)
                flex, cnt = self.count(m)
                msize = 0 if flex else s * cnt
                self.add_entries(entries, m, sub, 0, msize, s * cnt, flex)
                size = max(size, msize)
                align = max(align, a_eff)
        if agg.attrs.aligned:
            align = max(align, agg.attrs.aligned)
        size = -(-size // align) * align
        res = (size, align, entries)
        self.cache[key] = res
        return res

    def add_entries(self, entries: list, m: Member, sub: Optional[Agg], off: int, size: int,
                    elem: int, flex: bool) -> None:
        if m.name is None:
            # Anonymous struct/union: its members belong to the enclosing one.
            assert sub is not None
            for e in self.agg_layout(sub)[2]:
                entries.append(Entry(e.path, e.offset + off, e.size, e.flex, e.elem, e.bitfield))
            return
        entries.append(Entry(m.name, off, size, flex, elem))
        if m.inline is not None and not m.dims:
            # A named member of an anonymous (or inline) type: its members by dotted path.
            for e in self.agg_layout(m.inline)[2]:
                entries.append(Entry(f"{m.name}.{e.path}", e.offset + off, e.size, e.flex,
                                     e.elem, e.bitfield))


def agg_index(aggs: list) -> dict:
    idx = {}
    for a in aggs:
        if a.tag:
            idx[f"{a.kind} {a.tag}"] = a
    return idx


# --------------------------------------------------------------------------------------
# Kernel headers
# --------------------------------------------------------------------------------------


def ifc_name(tag: str) -> str:
    n = tag[len("mlx5_ifc_"):] if tag.startswith("mlx5_ifc_") else tag
    return n[: -len("_bits")] if n.endswith("_bits") else n


def is_reserved(path: str) -> bool:
    return any(p.startswith("reserved_") for p in path.split("."))


@dataclass
class KernelModel:
    srcs: dict  # file -> Source
    parsed: dict  # file -> Parsed
    consts: dict  # file -> [Const]
    ifc_layouter: Layouter
    ifc_aggs: list
    layouters: dict  # file -> Layouter (C)
    structs: dict  # file -> [(Agg, size, entries)]
    ifc_layouts: list  # [(name, size_bits, entries)]


def ifc_funcs(ifc_lay: "Layouter", ifc_idx: dict) -> dict:
    """BIT() and the sizeof/offsetof helpers of device.h, evaluated on the ifc layouts."""

    def agg_for(kind: str, toks: list) -> Agg:
        name = "".join(t.text for t in toks)
        a = ifc_idx.get(f"{kind} mlx5_ifc_{name}_bits")
        if a is None:
            raise Unsupported(f"no ifc {kind} {name}")
        return a

    def fld(args: list) -> Entry:
        a = agg_for("struct", args[0])
        path = "".join(t.text for t in args[1])
        for e in ifc_lay.agg_layout(a)[2]:
            if e.path == path:
                return e
        raise Unsupported(f"no field {path}")

    def size_bits(kind: str, args: list) -> int:
        return ifc_lay.agg_layout(agg_for(kind, args[0]))[0]

    def bit(ev: Evaluator, args: list, t: CType = ULONG) -> CVal:
        n = Evaluator(ev.ident, ev.funcs, ev.macro_tokens).eval_tokens(args[0]).value
        if not 0 <= n < 64:
            raise Unsupported("BIT out of range")
        return CVal(1 << n, t)

    return {
        "BIT": lambda ev, a: bit(ev, a),
        "BIT_ULL": lambda ev, a: bit(ev, a),
        "MLX5_ST_SZ_BYTES": lambda ev, a: CVal(size_bits("struct", a) // 8, SIZE_T),
        "MLX5_ST_SZ_DW": lambda ev, a: CVal(size_bits("struct", a) // 32, SIZE_T),
        "MLX5_ST_SZ_QW": lambda ev, a: CVal(size_bits("struct", a) // 64, SIZE_T),
        "MLX5_UN_SZ_BYTES": lambda ev, a: CVal(size_bits("union", a) // 8, SIZE_T),
        "MLX5_UN_SZ_DW": lambda ev, a: CVal(size_bits("union", a) // 32, SIZE_T),
        "__mlx5_st_sz_bits": lambda ev, a: CVal(size_bits("struct", a), SIZE_T),
        "MLX5_FLD_SZ_BYTES": lambda ev, a: CVal(fld(a).size // 8, SIZE_T),
        "__mlx5_bit_sz": lambda ev, a: CVal(fld(a).size, SIZE_T),
        "__mlx5_bit_off": lambda ev, a: CVal(fld(a).offset, SIZE_T),
        "MLX5_BYTE_OFF": lambda ev, a: CVal(fld(a).offset // 8, SIZE_T),
    }


def build_kernel(kdir: str) -> KernelModel:
    srcs, parsed, consts = {}, {}, {}
    for f in ["mlx5_ifc_fpga.h"] + KERNEL_FILES:
        srcs[f] = preprocess(os.path.join(kdir, f))
        parsed[f] = parse_c(srcs[f])
    ifc_aggs = parsed["mlx5_ifc_fpga.h"].aggs + parsed["mlx5_ifc.h"].aggs
    ifc_idx = agg_index(ifc_aggs)
    # mlx5_ifc.h: constants first (array bounds may use them), then layouts.
    ifc_env = ConstEnv({})
    ifc_lay = Layouter({"u8": 1}, ifc_idx, None, bit_units=True)
    ifc_env.funcs = ifc_funcs(ifc_lay, ifc_idx)
    ifc_lay.ev = ifc_env.evaluator()
    mlx5 = lambda n: n.startswith("MLX5_")  # noqa: E731
    fpga_consts = collect_consts(srcs["mlx5_ifc_fpga.h"], parsed["mlx5_ifc_fpga.h"], ifc_env, mlx5)
    consts["mlx5_ifc.h"] = collect_consts(srcs["mlx5_ifc.h"], parsed["mlx5_ifc.h"], ifc_env, mlx5)
    del fpga_consts  # the fpga header's constants are not part of mlx5_ifc.txt
    ifc_lay.ev = ifc_env.evaluator()
    ifc_layouts = []
    for a in ifc_aggs:
        if not a.tag or not a.tag.startswith("mlx5_ifc_"):
            continue
        size, _, entries = ifc_lay.agg_layout(a)
        ifc_layouts.append((ifc_name(a.tag), size, entries))
    # device.h, qp.h, cq.h build on each other (qp.h includes device.h, cq.h driver.h).
    env = ConstEnv(ifc_env.funcs, ifc_env)
    layouters, structs = {}, {}
    for f in ["device.h", "qp.h", "cq.h", "doorbell.h"]:
        henv = ConstEnv(ifc_env.funcs, env if f != "doorbell.h" else None)
        consts[f] = collect_consts(srcs[f], parsed[f], henv, lambda n: True)
        if f != "doorbell.h":
            env = henv
        lay = Layouter(BASE_TYPES_C, agg_index(parsed[f].aggs), henv.evaluator())
        layouters[f] = lay
        out = []
        for a in parsed[f].aggs:
            try:
                size, _, entries = lay.agg_layout(a)
                # A tagged struct defined inside another is kept only with its parent.
                for sub in a.nested_tagged:
                    lay.agg_layout(sub)
            except Unsupported:
                continue
            out.append((a, size, entries))
        nested_ok = {id(sub) for a, _, _ in out for sub in a.nested_tagged}
        structs[f] = [x for x in out if x[0].span != (0, 0) or id(x[0]) in nested_ok]

    return KernelModel(srcs, parsed, consts, ifc_lay, ifc_aggs, layouters, structs, ifc_layouts)


def header_comment(path: str, what: str) -> list:
    return [
        f"# {what}",
        f"# generated by tools/conformance/gen.py from {path} ({package_of(path)}); do not edit",
    ]


def render_ifc(km: KernelModel, path: str) -> str:
    lines = header_comment(path, "PRM layouts of mlx5_ifc.h (and mlx5_ifc_fpga.h): bit offsets and widths")
    lines.append("# layout <struct> <size_bits> | field <struct> <field> <bit> <width> | "
                 "flex <struct> <field> <element_width> | const <NAME> <value>")
    for name, size, entries in km.ifc_layouts:
        lines.append(f"layout {name} {size}")
        for e in entries:
            if is_reserved(e.path):
                continue
            lines.append(f"field {name} {e.path} {e.offset} {e.size}")
            if e.flex:
                lines.append(f"flex {name} {e.path} {e.elem}")
    for c in km.consts["mlx5_ifc.h"]:
        lines.append(f"const {c.name} {c.value}")
    return "\n".join(lines) + "\n"


def render_c_header(km: KernelModel, f: str, path: str) -> str:
    lines = header_comment(path, f"byte layouts and constants of {f}")
    lines.append("# struct <name> <size> | member <struct> <member> <offset> <size> | const <NAME> <value>")
    for a, size, entries in km.structs[f]:
        lines += struct_lines(a.tag, size, entries)
    for c in km.consts[f]:
        lines.append(f"const {c.name} {c.value}")
    return "\n".join(lines) + "\n"


def struct_lines(name: str, size: int, entries: list) -> list:
    out = [f"struct {name} {size}"]
    for e in entries:
        if e.bitfield or e.flex:
            continue
        out.append(f"member {name} {e.path} {e.offset} {e.size}")
    return out


# --------------------------------------------------------------------------------------
# mlx5dv.h: measured by gcc
# --------------------------------------------------------------------------------------

DV_PRELUDE = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <endian.h>
#include <limits.h>
#include <infiniband/mlx5dv.h>
#define FV_U64(x) _Generic((x), int: (unsigned long long)(unsigned int)(x), \
	default: (unsigned long long)(x))
#define FV_SZ(T, m) sizeof(((T *)0)->m)
static void fv_bytes(const char *name, const void *p, size_t n)
{
	const unsigned char *b = p;
	printf("bytes %s ", name);
	for (size_t i = 0; i < n; i++)
		printf("%02x", b[i]);
	printf("\n");
}
"""

# The reference byte vectors: each fills a 0xEE-prefilled buffer through the header's
# inline helpers. Names and arguments are stable (hw tests compare against them).
DV_VECTORS = r"""
	{ /* mlx5-datapath.md 2.6: RDMA WRITE ctrl segment */
		unsigned char b[16]; memset(b, 0xee, sizeof(b));
		mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)b, 0x1234, MLX5_OPCODE_RDMA_WRITE, 0,
				    0xABCDEF, 0x08 | 0x02 | 0x80, 3, 0, htobe32(0xDEADBEEF));
		fv_bytes("ctrl_seg", b, sizeof(b));
	}
	{ /* the same through the SSSE3 helper (writes bytes 9-10 as zero) */
		unsigned char b[16] __attribute__((aligned(16))); memset(b, 0xee, sizeof(b));
		mlx5dv_x86_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)b, 0x1234, MLX5_OPCODE_RDMA_WRITE, 0,
					0xABCDEF, 0x08 | 0x02 | 0x80, 3, 0, htobe32(0xDEADBEEF));
		fv_bytes("ctrl_seg_x86", b, sizeof(b));
	}
	{ /* every ctrl field non-zero: opmod, pi wrap value, signature, fence, ds max */
		unsigned char b[16]; memset(b, 0xee, sizeof(b));
		mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)b, 0xFFFF, MLX5_OPCODE_SEND_IMM, 0x5A,
				    0x000001, MLX5_WQE_CTRL_FENCE | MLX5_WQE_CTRL_CQ_UPDATE | MLX5_WQE_CTRL_SOLICITED,
				    0x3F, 0xA5, 0x11223344);
		fv_bytes("ctrl_seg_full", b, sizeof(b));
	}
	{
		unsigned char b[16]; memset(b, 0xee, sizeof(b));
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)b, 0x100, 0x1234, 0x1122334455667788ULL);
		fv_bytes("data_seg", b, sizeof(b));
	}
	{
		unsigned char b[16] __attribute__((aligned(16))); memset(b, 0xee, sizeof(b));
		mlx5dv_x86_set_data_seg((struct mlx5_wqe_data_seg *)b, 0x100, 0x1234, 0x1122334455667788ULL);
		fv_bytes("data_seg_x86", b, sizeof(b));
	}
	{ /* the receive-queue terminator: byte_count 0, lkey MLX5_INVALID_LKEY, addr 0 */
		unsigned char b[16]; memset(b, 0xee, sizeof(b));
		mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)b, 0, MLX5_INVALID_LKEY, 0);
		fv_bytes("data_seg_invalid_lkey", b, sizeof(b));
	}
	{ /* mlx5-datapath.md 2.6: datagram segment (address vector) */
		unsigned char b[48]; memset(b, 0xee, sizeof(b));
		uint8_t rmac[6] = {1, 2, 3, 4, 5, 6};
		uint8_t rgid[16];
		for (int i = 0; i < 16; i++)
			rgid[i] = 0xa0 + i;
		mlx5dv_set_dgram_seg((struct mlx5_wqe_datagram_seg *)b, 0x11111111ULL << 32, 0x123456, 1,
				     0x35, 0x85, 0x4321, rmac, 0x22, 0x40,
				     (1u << 30) | (3u << 20) | 0x12345, rgid);
		fv_bytes("dgram_seg", b, sizeof(b));
	}
	{ /* a UD address vector without the extension bit and without GRH */
		unsigned char b[48]; memset(b, 0xee, sizeof(b));
		uint8_t rmac[6] = {0, 0, 0, 0, 0, 0};
		uint8_t rgid[16] = {0};
		mlx5dv_set_dgram_seg((struct mlx5_wqe_datagram_seg *)b, 0x80010000ULL << 32, 0x000abc, 0,
				     0x00, 0x00, 0x0001, rmac, 0x00, 0x00, 0, rgid);
		fv_bytes("dgram_seg_noext", b, sizeof(b));
	}
	{ /* Ethernet segment with L3/L4 checksum offload and 18 inline header bytes */
		unsigned char b[32]; memset(b, 0xee, sizeof(b));
		uint8_t hdr[18];
		for (int i = 0; i < 18; i++)
			hdr[i] = 0x10 + i;
		mlx5dv_set_eth_seg((struct mlx5_wqe_eth_seg *)b, MLX5_ETH_WQE_L3_CSUM | MLX5_ETH_WQE_L4_CSUM,
				   0, 18, hdr);
		fv_bytes("eth_seg", b, sizeof(b));
	}
	{ /* CQE owner bit set on a zeroed CQE whose op_own is 0x26 */
		struct mlx5_cqe64 c; memset(&c, 0, sizeof(c));
		c.op_own = 0x26;
		mlx5dv_set_cqe_owner(&c, 1);
		fv_bytes("cqe64_owner", &c, sizeof(c));
	}
	{ /* CQE owner bit cleared on a 0xEE-filled CQE */
		struct mlx5_cqe64 c; memset(&c, 0xee, sizeof(c));
		mlx5dv_set_cqe_owner(&c, 0);
		fv_bytes("cqe64_owner_clear", &c, sizeof(c));
	}
	{ /* the getters, as bytes: owner, se, format, opcode of op_own 0xd7 */
		struct mlx5_cqe64 c; memset(&c, 0, sizeof(c));
		c.op_own = 0xd7;
		unsigned char g[4] = { mlx5dv_get_cqe_owner(&c), mlx5dv_get_cqe_se(&c),
				       mlx5dv_get_cqe_format(&c), mlx5dv_get_cqe_opcode(&c) };
		fv_bytes("cqe64_getters_d7", g, sizeof(g));
	}
"""


def run_c(program: str, tmp: str, name: str, flags: list) -> str:
    gcc = need_gcc()
    c = os.path.join(tmp, name + ".c")
    exe = os.path.join(tmp, name)
    with open(c, "w") as f:
        f.write(program)
    r = subprocess.run([gcc, "-O0", "-w", *flags, c, "-o", exe], capture_output=True, text=True)
    if r.returncode != 0:
        raise CompileError(r.stderr)
    r = subprocess.run([exe], capture_output=True, text=True)
    if r.returncode != 0:
        raise GenError(f"{name} failed: {r.stderr}")
    return r.stdout


class CompileError(GenError):
    def error_lines(self) -> set:
        return {int(m.group(1)) for m in re.finditer(r"\.c:(\d+):\d+: error", str(self))}


def dv_model(path: str) -> tuple:
    src = preprocess(path)
    parsed = parse_c(src)
    return src, parsed


def dv_members(agg: Agg, prefix: str = "") -> list:
    """Member paths (no bit-fields, no `[]`) of an mlx5dv.h structure, in order."""
    out = []
    for m in agg.members:
        if m.bitwidth is not None:
            continue
        if m.name is None:
            if m.inline is not None:
                out += dv_members(m.inline, prefix)
            continue
        if any(len(d) == 0 for d in m.dims):
            continue
        out.append(prefix + m.name)
        if m.inline is not None and not m.dims:
            out += dv_members(m.inline, prefix + m.name + ".")
    return out


def gen_mlx5dv(path: str, tmp: str) -> tuple:
    """Runs the measuring program; returns (fixture text, parsed model)."""
    src, parsed = dv_model(path)
    body = []
    for a in parsed.aggs:
        if not a.tag:
            continue
        t = f"{a.kind} {a.tag}"
        body.append(f'\tprintf("struct {a.tag} %zu\\n", sizeof({t}));')
        for p in dv_members(a):
            body.append(f'\tprintf("member {a.tag} {p} %zu %zu\\n", offsetof({t}, {p}), FV_SZ({t}, {p}));')
    names = [e.name for e in parsed.enums if e.name.startswith(("MLX5_", "MLX5DV_"))]
    cands = [d.name for d in src.defines if d.params is None and d.body
             and d.name.startswith(("MLX5_", "MLX5DV_")) and not re.search(r"[\"'{};]", d.body)]
    checks = list(dict.fromkeys(names + cands))
    while True:
        pre = DV_PRELUDE.strip().split("\n")
        line_of = {}
        chk = []
        for k, n in enumerate(checks):
            line_of[len(pre) + len(chk) + 1] = n
            chk.append(f"enum {{ fv_chk_{k} = ((({n})) ? 1 : 0) }};")
        prog = pre + chk + ["int main(void)", "{"] + body
        prog += [f'\tprintf("const {n} %llu\\n", FV_U64({n}));' for n in checks]
        prog += DV_VECTORS.strip("\n").split("\n") + ["\treturn 0;", "}", ""]
        try:
            out = run_c("\n".join(prog), tmp, "mlx5dv_measure", ["-mssse3"])
            break
        except CompileError as e:
            bad = {line_of[ln] for ln in e.error_lines() if ln in line_of}
            if not bad:
                raise GenError("the mlx5dv.h measuring program does not compile:\n" + str(e))
            checks = [n for n in checks if n not in bad]
    lines = header_comment(path, "byte layouts, constants and helper output of infiniband/mlx5dv.h (measured with gcc -mssse3, x86-64)")
    lines.append("# struct <name> <size> | member <struct> <member> <offset> <size> | "
                 "const <NAME> <value> | bytes <vector> <hex>")
    return "\n".join(lines) + "\n" + out, (src, parsed)


# --------------------------------------------------------------------------------------
# Generation
# --------------------------------------------------------------------------------------


def generate(out_dir: str, kdir: str, dv: str) -> None:
    km = build_kernel(kdir)
    os.makedirs(out_dir, exist_ok=True)
    files = {"mlx5_ifc.txt": render_ifc(km, os.path.join(kdir, "mlx5_ifc.h"))}
    for f in ["device.h", "qp.h", "cq.h", "doorbell.h"]:
        files[f.replace(".h", ".txt")] = render_c_header(km, f, os.path.join(kdir, f))
    with tempfile.TemporaryDirectory(prefix="fv-conf-") as tmp:
        files["mlx5dv.txt"] = gen_mlx5dv(dv, tmp)[0]
    for name in FIXTURES:
        with open(os.path.join(out_dir, name), "w") as f:
            f.write(files[name])
    summary = {n: sum(1 for line in files[n].split("\n") if line and not line.startswith("#"))
               for n in FIXTURES}
    print("wrote " + ", ".join(f"{n} ({c} lines)" for n, c in summary.items()))


# --------------------------------------------------------------------------------------
# Self-test: the engine against gcc
# --------------------------------------------------------------------------------------

KERNEL_SHIM = r"""
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
typedef uint8_t u8; typedef uint16_t u16; typedef uint32_t u32; typedef uint64_t u64;
typedef int8_t s8; typedef int16_t s16; typedef int32_t s32; typedef int64_t s64;
typedef uint8_t __u8; typedef uint16_t __u16; typedef uint32_t __u32; typedef uint64_t __u64;
typedef uint16_t __be16; typedef uint32_t __be32; typedef uint64_t __be64;
typedef uint16_t __le16; typedef uint32_t __le32; typedef uint64_t __le64;
#define __packed __attribute__((__packed__))
#define __aligned(x) __attribute__((__aligned__(x)))
#define BIT(nr) (1UL << (nr))
#define BIT_ULL(nr) (1ULL << (nr))
#define struct_group(NAME, ...) union { struct { __VA_ARGS__ }; struct { __VA_ARGS__ } NAME; }
#define DECLARE_FLEX_ARRAY(T, N) struct { struct { } __empty_##N; T N[]; }
#define MLX5_ST_SZ_BYTES(t) (sizeof(struct mlx5_ifc_##t##_bits) / 8)
#define MLX5_ST_SZ_DW(t) (sizeof(struct mlx5_ifc_##t##_bits) / 32)
#define MLX5_ST_SZ_QW(t) (sizeof(struct mlx5_ifc_##t##_bits) / 64)
#define MLX5_UN_SZ_BYTES(t) (sizeof(union mlx5_ifc_##t##_bits) / 8)
#define MLX5_UN_SZ_DW(t) (sizeof(union mlx5_ifc_##t##_bits) / 32)
#define __mlx5_st_sz_bits(t) sizeof(struct mlx5_ifc_##t##_bits)
#define __mlx5_bit_sz(t, f) sizeof(((struct mlx5_ifc_##t##_bits *)0)->f)
#define __mlx5_bit_off(t, f) offsetof(struct mlx5_ifc_##t##_bits, f)
#define MLX5_FLD_SZ_BYTES(t, f) (__mlx5_bit_sz(t, f) / 8)
#define MLX5_BYTE_OFF(t, f) (__mlx5_bit_off(t, f) / 8)
#define FV_U64(x) _Generic((x), int: (unsigned long long)(unsigned int)(x), \
	default: (unsigned long long)(x))
struct fv_ent { const char *s, *m; unsigned long long a, b; };
"""


class Mismatches:
    def __init__(self) -> None:
        self.items: list = []
        self.checked = 0

    def eq(self, what: str, py, c) -> None:
        self.checked += 1
        if py != c:
            self.items.append(f"{what}: engine {py}, gcc {c}")


def table_program(includes: str, rows: list, consts: list) -> str:
    """rows: (struct, member, expr_a, expr_b); consts: names."""
    out = [KERNEL_SHIM, includes, "static const struct fv_ent fv_tab[] = {"]
    for s, m, a, b in rows:
        out.append(f'\t{{"{s}", "{m}", {a}, {b}}},')
    out.append('\t{0, 0, 0, 0}\n};')
    out.append("int main(void)\n{")
    out.append('\tfor (const struct fv_ent *e = fv_tab; e->s; e++)\n'
               '\t\tprintf("%s %s %llu %llu\\n", e->s, e->m, e->a, e->b);')
    for n in consts:
        out.append(f'\tprintf("const {n} %llu\\n", FV_U64({n}));')
    out.append("\treturn 0;\n}\n")
    return "\n".join(out)


def parse_table(out: str) -> tuple:
    rows, consts = {}, {}
    for line in out.splitlines():
        p = line.split()
        if p[0] == "const":
            consts[p[1]] = int(p[2])
        else:
            rows[(p[0], p[1])] = (int(p[2]), int(p[3]))
    return rows, consts


def selftest_ifc(km: KernelModel, kdir: str, tmp: str, mm: Mismatches) -> None:
    rows = []
    expect = {}
    for a in km.ifc_aggs:
        if not a.tag or not a.tag.startswith("mlx5_ifc_"):
            continue
        t = f"{a.kind} {a.tag}"
        size, _, entries = km.ifc_layouter.agg_layout(a)
        rows.append((a.tag, "-", f"sizeof({t})", "0"))
        expect[(a.tag, "-")] = (size, 0)
        for e in entries:
            if e.flex:
                rows.append((a.tag, e.path, f"offsetof({t}, {e.path})", f"sizeof(((({t} *)0)->{e.path})[0])"))
                expect[(a.tag, e.path)] = (e.offset, e.elem)
            else:
                rows.append((a.tag, e.path, f"offsetof({t}, {e.path})", f"sizeof((({t} *)0)->{e.path})"))
                expect[(a.tag, e.path)] = (e.offset, e.size)
    consts = [c.name for c in km.consts["mlx5_ifc.h"]]
    inc = f'#include "{os.path.join(kdir, "mlx5_ifc.h")}"'
    got_rows, got_consts = parse_table(run_c(table_program(inc, rows, consts), tmp, "ifc_check", []))
    for k, v in expect.items():
        mm.eq(f"mlx5_ifc {k[0]}.{k[1]}", v, got_rows.get(k))
    for c in km.consts["mlx5_ifc.h"]:
        mm.eq(f"mlx5_ifc const {c.name}", c.value, got_consts.get(c.name))
    print(f"selftest: mlx5_ifc.h: {len(expect)} sizes/fields and {len(consts)} constants compared with gcc")


def c_const_decls(consts: list) -> list:
    out = []
    for c in consts:
        if c.is_enum:
            out.append(f"enum {{ {c.name} = {c.c_text} }};")
        else:
            out.append(f"#define {c.name} {c.c_text}")
    return out


def selftest_kernel(km: KernelModel, kdir: str, tmp: str, mm: Mismatches) -> None:
    deps = {"device.h": [], "qp.h": ["device.h"], "cq.h": ["device.h", "qp.h"], "doorbell.h": []}
    for f in ["device.h", "qp.h", "cq.h", "doorbell.h"]:
        decl = [f'#include "{os.path.join(kdir, "mlx5_ifc.h")}"']
        seen = set()
        for d in deps[f] + [f]:
            for c in km.consts[d]:
                if c.name in seen:
                    continue
                seen.add(c.name)
                decl += c_const_decls([c])
        text = km.srcs[f].text
        rows, expect = [], {}
        done = set()
        for a, size, entries in km.structs[f]:
            if a.span != (0, 0):
                decl.append(text[a.span[0] : a.span[1]])
                done.add(id(a))
            t = f"{a.kind} {a.tag}"
            rows.append((a.tag, "-", f"sizeof({t})", "0"))
            expect[(a.tag, "-")] = (size, 0)
            for e in entries:
                if e.bitfield or e.flex:
                    continue
                rows.append((a.tag, e.path, f"offsetof({t}, {e.path})", f"sizeof((({t} *)0)->{e.path})"))
                expect[(a.tag, e.path)] = (e.offset, e.size)
        names = [c.name for c in km.consts[f]]
        out = run_c(table_program("\n".join(decl), rows, names), tmp, f"check_{f[:-2]}", [])
        got_rows, got_consts = parse_table(out)
        for k, v in expect.items():
            mm.eq(f"{f} {k[0]}.{k[1]}", v, got_rows.get(k))
        for c in km.consts[f]:
            mm.eq(f"{f} const {c.name}", c.value, got_consts.get(c.name))
        print(f"selftest: {f}: {len(expect)} sizes/members and {len(names)} constants compared with gcc")


def selftest_dv(dv: str, tmp: str, mm: Mismatches) -> None:
    text, (src, parsed) = gen_mlx5dv(dv, tmp)
    got: dict = {}
    for line in text.splitlines():
        p = line.split()
        if not p or p[0].startswith("#"):
            continue
        if p[0] == "struct":
            got[(p[1], "-")] = int(p[2])
        elif p[0] == "member":
            got[(p[1], p[2])] = (int(p[3]), int(p[4]))
        elif p[0] == "const":
            got[("const", p[1])] = int(p[2])
    env = ConstEnv({})
    consts = collect_consts(src, parsed, env, lambda n: n.startswith(("MLX5_", "MLX5DV_")))
    nc = 0
    for c in consts:
        if ("const", c.name) in got:
            mm.eq(f"mlx5dv const {c.name}", c.value, got[("const", c.name)])
            nc += 1
    lay = Layouter(BASE_TYPES_C, agg_index(parsed.aggs), env.evaluator())
    ns = nm = 0
    for a in parsed.aggs:
        if not a.tag:
            continue
        try:
            size, _, entries = lay.agg_layout(a)
        except Unsupported:
            continue
        ns += 1
        mm.eq(f"mlx5dv {a.tag} size", size, got.get((a.tag, "-")))
        for e in entries:
            if e.bitfield or e.flex:
                continue
            nm += 1
            mm.eq(f"mlx5dv {a.tag}.{e.path}", (e.offset, e.size), got.get((a.tag, e.path)))
    print(f"selftest: mlx5dv.h: engine computed {ns} structs, {nm} members, {nc} constants; compared with gcc")


SYNTHETIC = r"""
struct fv_a { u8 a; __be32 b; u8 c:1; u8 d:7; u8 e:4; __be16 f; u16 g:9; u16 h:9; u8 i; };
struct fv_b { u8 a; union { __be32 x; struct { u8 y; __be16 z; }; }; u8 t[3]; } __packed;
struct fv_c { u8 a; __be64 b __aligned(16); struct { u8 p; __be32 q; } __packed n; u8 c; };
struct fv_d { __be32 a; u8 b; __be16 c; u8 d; __be32 e; } __attribute__((__packed__)) __attribute__((__aligned__(4)));
union fv_e { u8 a[5]; __be32 b; struct { u16 c; u8 d[0]; } s; };
struct fv_f { __be32 a; __be32 b[]; };
struct fv_g { u8 a; struct_group(grp, u8 b; __be32 c;); union { struct { __be16 d; union { u8 e[2]; DECLARE_FLEX_ARRAY(u8, f); }; } g; __be32 h; }; };
struct fv_h { u64 a:3; u32 b:30; u8 c; u64 d:40; };
struct fv_i { char a; u8 b:3; u8 :0; u8 c; int d[2][3]; } __packed;
"""


def selftest_synthetic(tmp: str, mm: Mismatches) -> None:
    src = Source("synthetic", SYNTHETIC, [])
    parsed = parse_c(src)
    lay = Layouter(BASE_TYPES_C, agg_index(parsed.aggs), ConstEnv({}).evaluator())
    rows, expect = [], {}
    for a in parsed.aggs:
        t = f"{a.kind} {a.tag}"
        size, _, entries = lay.agg_layout(a)
        rows.append((a.tag, "-", f"sizeof({t})", f"_Alignof({t})"))
        expect[(a.tag, "-")] = (size, lay.agg_layout(a)[1])
        for e in entries:
            if e.bitfield or e.flex:
                continue
            rows.append((a.tag, e.path, f"offsetof({t}, {e.path})", f"sizeof((({t} *)0)->{e.path})"))
            expect[(a.tag, e.path)] = (e.offset, e.size)
    got, _ = parse_table(run_c(table_program(SYNTHETIC, rows, []), tmp, "synthetic", []))
    for k, v in expect.items():
        mm.eq(f"synthetic {k[0]}.{k[1]}", v, got.get(k))
    # Expressions with C typing.
    exprs = ["1 << 31", "(1 << 31) | 1", "~0", "~0ULL", "0x80000000", "-1", "(u8)0x1ff",
             "1UL << 40", "(512 - 16 - 16) / 16", "-7 / 2", "-7 % 2", "0xffffffffU + 1",
             "(3 << 26) | (1 << 28)", "BIT(31)", "(uint64_t)1 << 63", "017", "1 ? 2 : 3"]
    ev = ConstEnv(ifc_funcs(Layouter({"u8": 1}, {}, None, bit_units=True), {})).evaluator()
    prog = [KERNEL_SHIM, "int main(void)\n{"]
    vals = []
    for x in exprs:
        vals.append(ev.eval_text(x).unsigned())
        prog.append(f'\tprintf("%llu\\n", FV_U64({x}));')
    prog.append("\treturn 0;\n}\n")
    out = run_c("\n".join(prog), tmp, "exprs", []).split()
    for x, v, g in zip(exprs, vals, out):
        mm.eq(f"expression {x}", v, int(g))
    print(f"selftest: synthetic structs ({len(expect)} items) and {len(exprs)} expressions compared with gcc")


def selftest(kdir: str, dv: str) -> int:
    need_gcc()
    mm = Mismatches()
    km = build_kernel(kdir)
    with tempfile.TemporaryDirectory(prefix="fv-conf-") as tmp:
        selftest_synthetic(tmp, mm)
        selftest_ifc(km, kdir, tmp, mm)
        selftest_kernel(km, kdir, tmp, mm)
        selftest_dv(dv, tmp, mm)
    if mm.items:
        print(f"selftest FAILED: {len(mm.items)} of {mm.checked} comparisons differ:", file=sys.stderr)
        for m in mm.items[:200]:
            print("  " + m, file=sys.stderr)
        return 1
    print(f"selftest passed: {mm.checked} comparisons between the engine and gcc agree")
    return 0


def main(argv: list) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="directory to write the fixture files into")
    ap.add_argument("--selftest", action="store_true", help="cross-check the engine against gcc")
    ap.add_argument("--kernel-dir", help="override: directory holding mlx5_ifc.h, device.h, ...")
    ap.add_argument("--mlx5dv", help=f"override: path of mlx5dv.h (default {MLX5DV_H})")
    args = ap.parse_args(argv)
    if not args.out and not args.selftest:
        ap.error("give --out DIR and/or --selftest")
    try:
        kdir = find_kernel_dir(args.kernel_dir)
        dv = find_mlx5dv(args.mlx5dv)
        need_gcc()
        rc = 0
        if args.selftest:
            rc = selftest(kdir, dv)
        if args.out and rc == 0:
            generate(args.out, kdir, dv)
        return rc
    except GenError as e:
        print(f"gen.py: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
