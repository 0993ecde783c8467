#!/usr/bin/env python3
"""Extract Megatron-LM's command-line flag table from megatron/training/arguments.py.

The file is read as text and walked with the `ast` module; Megatron-LM is never
imported, so this runs without torch or Megatron installed.

Usage (from a Megatron-LM bare mirror):

    git --git-dir=<mirror> show core_v0.12.3:megatron/training/arguments.py > /tmp/args.py
    git --git-dir=<mirror> show core_v0.12.3:megatron/core/transformer/enums.py > /tmp/enums.py
    python3 extract_megatron_args.py /tmp/args.py --tag core_v0.12.3 \
        --commit "$(git --git-dir=<mirror> rev-parse core_v0.12.3^{commit})" \
        --enums /tmp/enums.py -o megatron_core_v0.12.3_args.json

Pass "-" as the path (or omit it) to read arguments.py from stdin.

Output layout:

    {
      "source": "NVIDIA/Megatron-LM <tag> megatron/training/arguments.py (commit <sha>)",
      "flags": {
        "--flag-name": {
          "dest": str,              # explicit dest=, else argparse's derivation
          "action": str,            # "store" when action= is absent
          "type": str | null,       # "int", "float", "str", "bool", or the source
                                    # text of a callable (e.g. a lambda); null if absent
          "choices": list | null,   # literal values; list(Enum) is resolved to member
                                    # names when --enums supplies the enum's module
          "nargs": int | str | null,
          "default": any,           # literal default (null when absent or None)
          "required": bool,
          "aliases": [str],         # every option string of the same add_argument call
          "function": str,          # enclosing _add_*_args function
          "line": int,              # line of the add_argument call at the tag
          # only when present:
          "choices_expr" / "default_expr" / "const" / "condition"
          "registered": false       # function not reachable from parse_args()
        }
      }
    }

Every option string is its own key; aliases share dest and the other fields.
Only literal add_argument(...) calls are seen. From core_v0.16.0 on, Megatron-LM also
builds flags from dataclasses (ArgumentGroupFactory.build_group); such calls are listed
under "extraction_warnings" and the table is then incomplete for that tag.
Requires Python >= 3.9 (ast.unparse).
"""

import argparse
import ast
import json
import sys

BUILTIN_TYPES = {"int", "float", "str", "bool"}


def _literal(node):
    """Return (True, value) for a JSON-representable literal, else (False, None)."""
    try:
        value = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return False, None
    if isinstance(value, tuple):
        value = list(value)
    try:
        json.dumps(value)
    except TypeError:
        return False, None
    return True, value


def _enum_members(enum_source):
    """Map enum class name -> member names, from a module's source text."""
    out = {}
    if not enum_source:
        return out
    tree = ast.parse(enum_source)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        members = []
        for stmt in node.body:
            if isinstance(stmt, ast.Assign):
                for target in stmt.targets:
                    if isinstance(target, ast.Name) and not target.id.startswith("_"):
                        members.append(target.id)
        if members:
            out[node.name] = members
    return out


def _resolve_choices(node, enums):
    ok, value = _literal(node)
    if ok:
        return value, None
    expr = ast.unparse(node)
    # list(SomeEnum) -> the names argparse accepts when type=lambda s: SomeEnum[s]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "list"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id in enums
    ):
        return list(enums[node.args[0].id]), expr
    return None, expr


def _derive_dest(option_strings):
    # argparse: first long option ('--x'), else first short option; strip the
    # prefix characters and turn '-' into '_'.
    long_opts = [s for s in option_strings if s.startswith("--")]
    name = long_opts[0] if long_opts else option_strings[0]
    return name.lstrip("-").replace("-", "_")


class _Collector(ast.NodeVisitor):
    def __init__(self, enums):
        self.enums = enums
        self.func_stack = []
        self.cond_stack = []
        self.calls = []  # (function, line, option_strings, info)
        self.problems = []

    def visit_FunctionDef(self, node):
        self.func_stack.append(node.name)
        saved = self.cond_stack
        self.cond_stack = []
        self.generic_visit(node)
        self.cond_stack = saved
        self.func_stack.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node):
        self.visit(node.test)
        self.cond_stack.append(ast.unparse(node.test))
        for stmt in node.body:
            self.visit(stmt)
        self.cond_stack[-1] = "not (%s)" % self.cond_stack[-1]
        for stmt in node.orelse:
            self.visit(stmt)
        self.cond_stack.pop()

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "build_group":
            # Megatron-LM >= core_v0.16.0 generates many flags from dataclasses
            # (ArgumentGroupFactory); those are not add_argument calls in this file.
            self.problems.append(
                "line %d: %s adds flags generated from a dataclass; they are NOT in this "
                "table" % (node.lineno, ast.unparse(node.func))
            )
            return
        if not (isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            return
        opts = []
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                opts.append(arg.value)
            else:
                self.problems.append(
                    "line %d: non-literal option string %s" % (node.lineno, ast.unparse(arg))
                )
        if not opts:
            return
        kw = {k.arg: k.value for k in node.keywords if k.arg is not None}
        if any(k.arg is None for k in node.keywords):
            self.problems.append("line %d: **kwargs in add_argument" % node.lineno)

        info = {}
        if "dest" in kw:
            ok, dest = _literal(kw["dest"])
            info["dest"] = dest if ok else ast.unparse(kw["dest"])
        else:
            info["dest"] = _derive_dest(opts)

        if "action" in kw:
            ok, action = _literal(kw["action"])
            info["action"] = action if ok else ast.unparse(kw["action"])
        else:
            info["action"] = "store"

        if "type" in kw:
            t = kw["type"]
            if isinstance(t, ast.Name) and t.id in BUILTIN_TYPES:
                info["type"] = t.id
            else:
                info["type"] = ast.unparse(t)
        else:
            info["type"] = None

        if "choices" in kw:
            choices, expr = _resolve_choices(kw["choices"], self.enums)
            info["choices"] = choices
            if expr is not None:
                info["choices_expr"] = expr
        else:
            info["choices"] = None

        if "nargs" in kw:
            ok, nargs = _literal(kw["nargs"])
            info["nargs"] = nargs if ok else ast.unparse(kw["nargs"])
        else:
            info["nargs"] = None

        if "default" in kw:
            ok, default = _literal(kw["default"])
            if ok:
                info["default"] = default
            else:
                info["default"] = None
                info["default_expr"] = ast.unparse(kw["default"])
        else:
            # argparse: store_true -> False, store_false -> True, else None
            info["default"] = {"store_true": False, "store_false": True}.get(
                info["action"], None
            )

        if "const" in kw:
            ok, const = _literal(kw["const"])
            info["const"] = const if ok else ast.unparse(kw["const"])

        if "required" in kw:
            ok, req = _literal(kw["required"])
            info["required"] = bool(req) if ok else ast.unparse(kw["required"])
        else:
            info["required"] = False

        info["aliases"] = list(opts)
        info["function"] = self.func_stack[-1] if self.func_stack else "<module>"
        info["line"] = node.lineno
        if self.cond_stack:
            info["condition"] = " and ".join(self.cond_stack)
        self.calls.append(info)


def _reachable_functions(tree, roots=("parse_args",)):
    """Module-level functions transitively called from the roots."""
    funcs = {
        n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    seen = set()
    todo = [r for r in roots if r in funcs]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for node in ast.walk(funcs[name]):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                if node.func.id in funcs and node.func.id not in seen:
                    todo.append(node.func.id)
    return seen


def extract(text, tag, commit=None, enum_source=None, path="megatron/training/arguments.py"):
    tree = ast.parse(text)
    collector = _Collector(_enum_members(enum_source))
    collector.visit(tree)
    reachable = _reachable_functions(tree)

    flags = {}
    duplicates = []
    for info in collector.calls:
        if info["function"] not in reachable:
            info["registered"] = False
        for opt in info["aliases"]:
            if opt in flags:
                duplicates.append(
                    {"flag": opt, "lines": [flags[opt]["line"], info["line"]]}
                )
                continue
            flags[opt] = info

    source = "NVIDIA/Megatron-LM %s %s" % (tag, path)
    if commit:
        source += " (commit %s)" % commit
    result = {"source": source, "flags": dict(sorted(flags.items()))}
    if duplicates:
        result["duplicate_option_strings"] = duplicates
    if collector.problems:
        result["extraction_warnings"] = collector.problems
    return result


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("path", nargs="?", default="-",
                    help="arguments.py path, or '-' for stdin (default)")
    ap.add_argument("--tag", required=True, help="release tag, e.g. core_v0.12.3")
    ap.add_argument("--commit", default=None, help="commit sha the tag points at")
    ap.add_argument("--enums", default=None,
                    help="megatron/core/transformer/enums.py at the same tag, used to "
                         "expand choices=list(AttnBackend)")
    ap.add_argument("-o", "--output", default="-", help="output JSON path ('-' = stdout)")
    args = ap.parse_args(argv)

    if args.path == "-":
        text = sys.stdin.read()
    else:
        with open(args.path, encoding="utf-8") as f:
            text = f.read()
    enum_source = None
    if args.enums:
        with open(args.enums, encoding="utf-8") as f:
            enum_source = f.read()

    result = extract(text, args.tag, args.commit, enum_source)
    out = json.dumps(result, indent=1, sort_keys=False) + "\n"
    if args.output == "-":
        sys.stdout.write(out)
    else:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(out)
    for w in result.get("extraction_warnings", []):
        print("warning: " + w, file=sys.stderr)
    print("%d option strings" % len(result["flags"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
