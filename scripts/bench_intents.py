"""Synthetic but realistic task intents for the memory benchmark (scripts/bench_memory.py).

Four families, in the shape of the benchmarks the harness runs: household tasks in ALFWorld's
phrasing, coding requests (BigCodeBench-like), SQL questions (Lifelong DB-like) and shell
tasks (Lifelong OS-like). Sentences are assembled from templates and word lists with a
seeded generator, so the same (n, seed) always yields the same list, without duplicates.
Every intent comes with an experience text of realistic length (a short plan plus a
trajectory in the harness's `> action` / observation form).
"""

from __future__ import annotations

import random

OBJECTS = """apple bread lettuce tomato potato egg mug cup bowl plate pan pot kettle knife
butterknife fork spoon spatula ladle saltshaker peppershaker soapbar soapbottle spraybottle
dishsponge cloth towel handtowel toiletpaper candle vase statue book cd cellphone creditcard
keychain pen pencil watch laptop pillow remotecontrol newspaper box alarmclock basketball
baseballbat tennisracket teddybear glassbottle winebottle houseplant tissuebox wateringcan
plunger scrubbrush desklamp floorlamp papertowelroll bathtubbasin showerglass ladle
sponge""".split()
RECEPTACLES = """countertop diningtable sidetable coffeetable desk dresser shelf drawer cabinet
fridge microwave sinkbasin bathtubbasin garbagecan safe armchair sofa bed ottoman toilet
stoveburner cart laundryhamper handtowelholder towelholder toiletpaperhanger tvstand
bookcase""".split()
ADJ = ["", "", "", "clean ", "hot ", "cold ", "small ", "large "]
HOUSE = [
    "put a {a}{o} in {r}.", "put some {o} on {r}.", "place a {a}{o} in {r}.",
    "clean some {o} and put it in {r}.", "rinse the {o}, then put it on the {r}.",
    "heat some {o} and put it in {r}.", "put a hot {o} on the {r}.",
    "cool some {o} and put it in {r}.", "put a cold {o} in the {r}.",
    "put two {o} in {r}.", "find two {o} and put them on the {r}.",
    "look at {o} under the desklamp.", "examine the {o} with the desklamp.",
    "pick up the {o} from the {r2} and move it to the {r}.",
    "find the {o} that is in the {r2} and place it in the {r}.",
]
VERBS = """parse validate merge deduplicate normalize aggregate filter sort group tokenize
compress encrypt hash summarize plot resample interpolate serialize download scrape convert
rank cluster impute count""".split()
DATA = """CSV file, JSON document, list of dictionaries, pandas DataFrame, log file, directory
of images, time series, SQLite table, HTML page, XML feed, dictionary of lists, numpy array,
text corpus, list of URLs, Excel sheet, YAML config, nested JSON, set of timestamps, matrix of
floats, list of email addresses""".split(", ")
GOALS = """and return the result as a DataFrame|and save a histogram to disk|and report the
most frequent values|using regular expressions|with a progress bar|and raise ValueError on bad
input|in linear time|and return a dictionary of counts|and write the output as JSON|with
multiprocessing|and return the top five rows|ignoring case and punctuation|and draw a seaborn
heatmap|grouped by month|keeping the original order|and return summary statistics""".replace(
    "\n", " ").split("|")
CODE = [
    "Write a function that {v}s a {d} {g}.", "Implement a Python helper to {v} a {d} {g}.",
    "Create a function to {v} the {d} {g}.", "Given a {d}, {v} it {g}.",
    "Write code that reads a {d}, {v}s it {g}.",
]
TABLES = """employees orders customers products invoices shipments students courses
enrollments flights bookings payments reviews suppliers inventory departments sessions
accounts transactions tickets""".split()
COLUMNS = """salary price amount age rating quantity score duration balance revenue
discount weight distance total credits""".split()
AGGS = ["average", "maximum", "minimum", "total", "median", "number of distinct"]
CONDS = """hired after 2019|in the marketing department|with status shipped|placed in March
|from Germany|with a rating above 4|that are overdue|created last week|with no manager|whose
name starts with A|in the top region|that were cancelled|paid by credit card|with more than
three items""".replace("\n", "").split("|")
SQL = [
    "Find the {agg} {c} of {t} {w}.", "List all {t} {w}, ordered by {c}.",
    "How many {t} are there {w}?", "Update the {c} of {t} {w} by ten percent.",
    "Delete {t} {w}.", "Show the {agg} {c} per group of {t} {w}.",
    "Insert a new row into {t} with the {c} of the latest record {w}.",
]
FILES = ["log", "txt", "csv", "py", "json", "conf", "tmp", "bak", "md", "sh"]
DIRS = """/var/log /tmp /home/user /etc /opt/app /srv/data /usr/local/bin /home/user/projects
/var/www /root""".split()
SHELL = [
    "Count the {f} files in {d} modified in the last {n} days.",
    "Find the largest {f} file under {d} and print its size.",
    "Delete every .{f} file in {d} older than {n} days.",
    "Create a user named {u} whose home directory is {d}/{u}.",
    "Change the owner of all .{f} files in {d} to {u}.",
    "Print the {n} most recent lines containing ERROR in {d}/{u}.{f}.",
    "Compress {d} into an archive named {u}.tar.gz, excluding .{f} files.",
    "How many lines in total do the .{f} files under {d} have?",
]
USERS = """alice bob carol dave erin frank grace heidi ivan judy mallory oscar peggy trent
victor walter""".split()


def _house(rng: random.Random) -> str:
    r, r2 = rng.sample(RECEPTACLES, 2)
    return rng.choice(HOUSE).format(a=rng.choice(ADJ), o=rng.choice(OBJECTS),
                                    r=f"{r} {rng.randint(1, 4)}" if rng.random() < 0.3 else r,
                                    r2=r2)


def _code(rng: random.Random) -> str:
    return rng.choice(CODE).format(v=rng.choice(VERBS), d=rng.choice(DATA), g=rng.choice(GOALS))


def _sql(rng: random.Random) -> str:
    return rng.choice(SQL).format(agg=rng.choice(AGGS), c=rng.choice(COLUMNS),
                                  t=rng.choice(TABLES), w=rng.choice(CONDS))


def _shell(rng: random.Random) -> str:
    return rng.choice(SHELL).format(f=rng.choice(FILES), d=rng.choice(DIRS),
                                    n=rng.randint(1, 60), u=rng.choice(USERS))


FAMILIES = (_house, _code, _sql, _shell)


def make_intents(n: int, seed: int = 0) -> list[str]:
    """`n` distinct intents, families mixed in equal shares, deterministic in (n, seed).

    The list for a smaller n is a prefix of the list for a larger n with the same seed, so
    one set of embeddings serves every bank size.
    """
    rng = random.Random(seed)
    seen: set[str] = set()
    out: list[str] = []
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise ValueError(f"the templates cannot produce {n} distinct intents")
        text = rng.choice(FAMILIES)(rng)
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


def make_experience(intent: str, i: int, chars: int = 1200) -> str:
    """A memory text of about `chars` characters in the shape the writer produces."""
    rng = random.Random(i)
    lines = [f"Plan for '{intent}': locate the target, act on it, verify the result.", ""]
    while sum(len(x) + 1 for x in lines) < chars:
        place = rng.choice(RECEPTACLES)
        thing = rng.choice(OBJECTS)
        lines.append(f"> go to {place} {rng.randint(1, 3)}")
        lines.append(f"On the {place}, you see a {thing} {rng.randint(1, 3)} and a "
                     f"{rng.choice(OBJECTS)} {rng.randint(1, 3)}.")
    return "\n".join(lines)[:chars]
