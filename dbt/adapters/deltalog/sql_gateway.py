"""The adapter's one SQL entry. Every statement dbt sends (`cursor.execute`) is read once, with sqlglot's
Spark tokenizer (quotes and comments are never mistaken for names), and takes one of four routes:

- SHOW / DESCRIBE about the warehouse: answered from the warehouse folder (catalog_sql.py);
- INSERT / UPDATE / DELETE on a warehouse table: one Delta commit (dml.py);
- an empty statement (a macro that did its work through the adapter): nothing;
- anything else: Spark runs it.

On the way, from the same tokens, the statement's names of warehouse relations are written as their
session views (`shop.orders` becomes `` `shop.orders` ``, `raw.shop.orders` of the attached catalog
`raw` becomes `` `raw.shop.orders` ``), a time-travel clause on a table
(`VERSION AS OF 3`, `TIMESTAMP AS OF '...'`) becomes a view of that snapshot, and every relation the
statement names is made current before it runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

from dbt.adapters.deltalog.warehouse import Warehouse

_STRING_TYPES = ("STRING", "RAW_STRING", "NATIONAL_STRING")


@dataclass(frozen=True)
class Token:
    """One token at its place in the statement's text (sqlglot re-reads a SHOW's tail: see `tokens`)."""
    kind: str  # sqlglot's token type name
    text: str  # without quotes for strings and quoted identifiers
    start: int  # first character
    end: int  # one past the last character

    @property
    def word(self) -> str:
        """The upper-cased keyword or name; "" for strings and quoted identifiers."""
        return self.text.upper() if self.kind not in _STRING_TYPES + ("IDENTIFIER",) else ""


def tokens(sql: str) -> List[Token]:
    from deltalog.sql import spark_dialect

    raw = spark_dialect().tokenize(sql)
    out = [Token(t.token_type.name, t.text, t.start, t.end + 1) for t in raw]
    if len(raw) == 2 and out[0].kind == "SHOW":
        # sqlglot keeps the rest of a SHOW command as one string: read it as SQL too
        offset = raw[0].end + 1
        out = out[:1] + [Token(t.token_type.name, t.text, t.start + offset, t.end + 1 + offset)
                         for t in spark_dialect().tokenize(sql[offset:])]
    return out


def _name_part(token: Token) -> Optional[str]:
    """The token as one part of a dotted name (a plain word or a backquoted name), else None."""
    if token.kind == "IDENTIFIER":
        return token.text
    if token.kind not in _STRING_TYPES and token.text.isidentifier():
        return token.text
    return None


@dataclass(frozen=True)
class Reference:
    """`schema.name` (`catalog.schema.name` for an attached catalog) where the statement names it:
    tokens [first, last]."""
    schema: str
    name: str
    first: int
    last: int
    catalog: Optional[str] = None


def _dotted(toks: List[Token], i: int, parts: int) -> Optional[List[str]]:
    """The `parts` names of a dotted name written without spaces from token i, else None."""
    names = []
    for k in range(parts):
        at = i + 2 * k
        if at >= len(toks) or (k and (toks[at - 1].kind != "DOT" or toks[at - 1].start != toks[at - 2].end
                                      or toks[at].start != toks[at - 1].end)):
            return None
        name = _name_part(toks[at])
        if not name or "." in name:
            return None
        names.append(name)
    return names


def references(toks: List[Token], catalogs: Iterable[str] = ()) -> List[Reference]:
    """Every two-part name: `schema.name` as one backquoted part, or schema.name with either part plain
    or backquoted; also as the qualifier of a column (shop.orders.id). With `catalogs` (the attached
    catalogs' names), also `catalog.schema.name` written either way. Any other name after a dot (the end
    of another catalog's catalog.schema.name) is none."""
    catalogs = set(catalogs)
    found = []
    i = 0
    while i < len(toks):
        t = toks[i]
        before_dot = i > 0 and toks[i - 1].kind == "DOT"
        if before_dot:
            i += 1
            continue
        if t.kind == "IDENTIFIER" and "." in t.text:
            parts = t.text.split(".")
            if len(parts) == 3 and parts[0] in catalogs and all(parts):
                found.append(Reference(parts[1], parts[2], i, i, parts[0]))
            elif len(parts) == 2 and all(parts):
                found.append(Reference(parts[0], parts[1], i, i))
            i += 1
            continue
        three = _dotted(toks, i, 3) if catalogs else None
        if three and three[0] in catalogs:
            found.append(Reference(three[1], three[2], i, i + 4, three[0]))
            i += 5
            continue
        two = _dotted(toks, i, 2)
        if two:
            found.append(Reference(two[0], two[1], i, i + 2))
            i += 3
            continue
        i += 1
    return found


@dataclass(frozen=True)
class Statement:
    """A statement as Spark is to run it: warehouse names written as their views, time travel replaced."""
    text: str
    tokens: List[Token]
    relations: List[Tuple[Optional[str], str, str]]  # the warehouse relations it names: (catalog, schema, name)

    @property
    def head(self) -> str:
        return self.tokens[0].word if self.tokens else ""


def read_statement(spark, warehouse: Warehouse, sql: str) -> Statement:
    """`sql` read once: names of warehouse relations quoted, time travel turned into snapshot views
    (only with `spark`; None leaves it for Spark to refuse)."""
    try:
        toks = tokens(sql)
    except Exception:  # not something the tokenizer reads (Spark will say what is wrong)
        return Statement(sql, [], [])
    edits: List[Tuple[int, int, str]] = []
    relations: List[Tuple[Optional[str], str, str]] = []
    schemas: Dict[Optional[str], set] = {}
    for ref in references(toks, [name for name in warehouse.catalogs if name]):
        plain = toks[ref.first].kind != "IDENTIFIER" or ref.first != ref.last
        holder = warehouse.of(ref.catalog)
        if plain:
            if ref.catalog not in schemas:
                schemas[ref.catalog] = set(holder.list_schemas())
            if ref.schema not in schemas[ref.catalog] or holder.lookup(ref.schema, ref.name) is None:
                continue  # not a warehouse relation (an alias and its column, another catalog's table)
        key = (ref.catalog, ref.schema, ref.name)
        if key not in relations:
            relations.append(key)
        view = f"`{holder.view_name(ref.schema, ref.name)}`"
        replacement, end = view, toks[ref.last].end
        clause = _time_travel_clause(toks, ref.last + 1) if spark is not None else None
        if clause is not None and holder.is_table(ref.schema, ref.name):
            replacement, end = _snapshot_view(spark, holder, ref, clause, toks), toks[clause[1]].end
        if plain or replacement != view:
            edits.append((toks[ref.first].start, end, replacement))
    text = sql
    for start, end, replacement in reversed(edits):
        text = text[:start] + replacement + text[end:]
    return Statement(text, toks if not edits else _reread(text, toks), relations)


def _reread(text: str, original: List[Token]) -> List[Token]:
    try:
        return tokens(text)
    except Exception:
        return original


def quote_warehouse_refs(sql: str, warehouse: Warehouse) -> str:
    """`sql` with each name of a warehouse relation written as its session view (`shop.orders` as
    `` `shop.orders` ``), for SQL written by hand (hooks, analyses, `dbt show --inline`). Text inside
    quotes and comments is left alone, and so is anything that is not in the warehouse."""
    if "." not in sql:
        return sql
    return read_statement(None, warehouse, sql).text


def _time_travel_clause(toks: List[Token], i: int) -> Optional[Tuple[str, int]]:
    """(VERSION | TIMESTAMP, index of the literal, or -1 when it is not a literal) when tokens from i on
    are a time-travel clause: [FOR] {VERSION | SYSTEM_VERSION | TIMESTAMP | SYSTEM_TIME} AS OF <literal>."""
    words = [t.word for t in toks[i: i + 5]]
    if words[:1] == ["FOR"]:
        words, i = words[1:], i + 1
    if len(words) < 3 or words[1:3] != ["AS", "OF"]:
        return None
    kind = {"VERSION": "VERSION", "SYSTEM_VERSION": "VERSION", "TIMESTAMP": "TIMESTAMP",
            "SYSTEM_TIME": "TIMESTAMP"}.get(words[0])
    if kind is None:
        return None
    literal_at = i + 3
    if literal_at >= len(toks):
        return kind, -1
    after = literal_at + 1
    # a literal ends the clause; anything else (an expression) is not supported here
    if after < len(toks) and toks[after].kind in ("DOT", "L_PAREN", "PLUS", "DASH", "STAR"):
        return kind, -1
    if toks[literal_at].kind not in _STRING_TYPES + ("NUMBER",):
        return kind, -1
    return kind, literal_at


def _snapshot_view(spark, warehouse: Warehouse, ref: Reference, clause: Tuple[str, int], toks: List[Token]) -> str:
    from dbt_common.exceptions import DbtRuntimeError

    from dbt.adapters.deltalog.catalog_sql import as_of_view

    kind, literal_at = clause
    name = warehouse.view_name(ref.schema, ref.name)
    if literal_at < 0:
        raise DbtRuntimeError(
            f"{kind} AS OF on {name}: give a literal here ({kind} AS OF 3 or TIMESTAMP AS OF "
            f"'2025-01-31 12:00:00'); expressions are not evaluated for time travel.")
    literal = toks[literal_at]
    table = warehouse.table(ref.schema, ref.name)
    try:
        if kind == "VERSION":
            if literal.kind != "NUMBER" or not literal.text.isdigit():
                raise ValueError(f"the version must be a whole number, not {literal.text!r}")
            return as_of_view(spark, table, name, version=int(literal.text))
        if literal.kind not in _STRING_TYPES:
            raise ValueError(f"the timestamp must be a quoted string, not {literal.text}")
        return as_of_view(spark, table, name, timestamp=literal.text)
    except DbtRuntimeError:
        raise
    except Exception as exc:
        raise DbtRuntimeError(f"{kind} AS OF on {name}: {exc}") from None


@dataclass
class Outcome:
    """What a statement gave: a DataFrame to fetch from, or rows already known (DML, empty, a query
    answered here: then with its columns as (name, type))."""
    dataframe: Any = None
    rows: Optional[List] = None
    columns: Optional[List[Tuple[str, str]]] = None


def answer_small_query(warehouse: Warehouse, sql: str, reuse: bool = False) -> Optional[Outcome]:
    """A data test's query over small warehouse tables, answered in this process without Spark when it
    means the same there (driver_queries.py); None when Spark runs it (`execute`). `reuse`: an earlier
    command's answer over the same versions is taken (answer_reuse.py)."""
    statement = read_statement(None, warehouse, sql)
    if statement.head not in ("SELECT", "WITH") or not statement.relations:
        return None
    return _answer_here(warehouse, statement, reuse)


def execute(spark, warehouse: Warehouse, sql: str, commit_info: Optional[Dict[str, Any]] = None) -> Outcome:
    """Run one statement (see the module's doc)."""
    from dbt.adapters.deltalog.catalog_sql import describe_statement, show_statement
    from dbt.adapters.deltalog.dml import try_execute_dml
    from dbt.adapters.deltalog.runtime.session import RUNTIME

    statement = read_statement(spark, warehouse, sql)
    if not statement.tokens and not strip_leading_comments(sql):
        return Outcome(rows=[])  # an empty statement (a macro that did its work through the adapter)
    if statement.head == "SHOW":
        shown = show_statement(spark, warehouse, statement.tokens)
        if shown is not None:
            return Outcome(dataframe=shown)
    if statement.head in ("DESC", "DESCRIBE"):
        shown = describe_statement(spark, warehouse, statement.tokens)
        if shown is not None:
            return Outcome(dataframe=shown)
    views = RUNTIME.views(spark)
    for catalog, schema, name in statement.relations:
        views.ensure(warehouse.of(catalog), schema, name)
    if statement.head in ("INSERT", "UPDATE", "DELETE"):
        version = try_execute_dml(spark, warehouse, strip_leading_comments(statement.text), commit_info)
        if version != "not-dml":
            return Outcome(rows=[])
    return Outcome(dataframe=spark.sql(statement.text))


def _answer_here(warehouse: Warehouse, statement: Statement, reuse: bool) -> Optional[Outcome]:
    from dbt.adapters.events.logging import AdapterLogger

    from dbt.adapters.deltalog.driver_queries import NotHere, answer

    logger = AdapterLogger("deltalog")
    kept = None
    if reuse:
        from dbt.adapters.deltalog.answer_reuse import known_by

        kept = known_by(warehouse, statement.text, statement.relations, relations_of_sql)
        answered = kept.answer()
        if answered is not None:
            logger.debug(f"answered in this process by DuckDB over {', '.join(answered.tables)}: an earlier "
                         f"command's answer over the same versions, reused")
            return Outcome(rows=answered.rows, columns=answered.columns)
    try:
        answered = answer(warehouse, statement.text, statement.relations, relations_of_sql)
    except NotHere as why:
        logger.debug(f"run by Spark, not in this process: {why}")
        return None
    logger.debug(f"answered in this process by DuckDB over {', '.join(answered.tables)}")
    if kept is not None:
        kept.keep(answered)
    return Outcome(rows=answered.rows, columns=answered.columns)


def relations_of_sql(warehouse: Warehouse, sql: str) -> Tuple[str, List[Tuple[Optional[str], str, str]]]:
    """`sql` with warehouse relations named by their session views, and the relations it names."""
    statement = read_statement(None, warehouse, sql)
    return statement.text, statement.relations


def statements(sql: str) -> List[str]:
    """The statements of a script, split at its semicolons (never one inside quotes or comments)."""
    try:
        cuts = [t.start for t in tokens(sql) if t.kind == "SEMICOLON"]
    except Exception:  # not something the tokenizer reads: one statement, for Spark to judge
        cuts = []
    parts, begin = [], 0
    for cut in cuts + [len(sql)]:
        parts.append(sql[begin:cut].strip())
        begin = cut + 1
    return [p for p in parts if strip_leading_comments(p)]


def strip_leading_comments(sql: str) -> str:
    """dbt prefixes statements with a `/* query comment */`; a statement's kind is read after it."""
    while True:
        sql = sql.lstrip()
        if sql.startswith("/*"):
            end = sql.find("*/")
            if end == -1:
                return sql
            sql = sql[end + 2:]
        elif sql.startswith("--"):
            end = sql.find("\n")
            sql = "" if end == -1 else sql[end + 1:]
        else:
            return sql
