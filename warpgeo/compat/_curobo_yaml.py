"""Reading cuRobo's robot configurations (YAML or dicts): what `load_robot_spheres` and `load_robot` share.

Every value is checked on the way in: a ValueError / TypeError naming the key (never a RecursionError,
OverflowError, MemoryError or UnicodeDecodeError from a hostile file)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

#: The largest magnitude a sphere's centre, radius or a buffer may have: the spheres are computed in float32,
#: where a larger value would be inf.
_FLOAT32_MAX = float(np.finfo(np.float32).max)

#: The fields of one sphere of ``collision_spheres``.
_SPHERE_FIELDS = ("center", "radius")

#: The radius of the disabled spheres ``extra_collision_spheres`` adds (cuRobo's; any negative radius is off).
_DISABLED_RADIUS = -10.0

#: The most disabled spheres ``extra_collision_spheres`` may add to one link (cuRobo's configurations use
#: 4-100; a count beyond this is a typo or a hostile file, not an attached object).
MAX_EXTRA_SPHERES = 2**16


def _robot_config(config: Any, root: Any) -> tuple[Mapping, str | None]:
    """A robot configuration (a dict, or read from a YAML path) and the folder relative paths start from."""
    if root is not None and not isinstance(root, (str, os.PathLike)):
        raise TypeError(f"root must be a folder path; got {type(root).__name__} {root!r:.60}")
    root_dir = None if root is None else os.fspath(root)
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        config = _yaml_mapping(path, "config", "a robot configuration (a mapping)")
        if root_dir is None:
            root_dir = os.path.dirname(os.path.abspath(path))
    elif not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict or a YAML file path; got {type(config).__name__}")
    return config, root_dir


def _float_value(value: Any, where: str) -> float:
    """A number of a robot configuration as a float within float32's range (an int beyond float64's range,
    inf, NaN or a value float32 cannot hold: ValueError naming ``where``; not a number: TypeError)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{where} must be a number; got {type(value).__name__} {value!r:.60}")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(
            f"{where} must be finite and within float32's range; got an int of {len(str(value))} digits"
        ) from None
    if not math.isfinite(number) or abs(number) > _FLOAT32_MAX:
        raise ValueError(f"{where} must be finite and within float32's range (|x| <= 3.4e38); got {number}")
    return number


def _yaml_mapping(path: str, where: str, what: str) -> Mapping:
    """The mapping a YAML file holds; ValueError naming ``where`` for a missing file, bad YAML or no mapping."""
    if not os.path.isfile(path):
        raise ValueError(f"{where}: no such file {path!r}")
    try:
        import yaml
    except ImportError as exc:
        raise ImportError(
            'reading a cuRobo YAML file needs PyYAML: pip install "warpgeo[curobo]" (or pyyaml), or pass the '
            "configuration as a dict"
        ) from exc
    with open(path, encoding="utf-8") as f:
        try:
            loaded = yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise ValueError(f"{where}: {path!r} is not valid YAML: {exc}") from exc
        except UnicodeDecodeError as exc:
            raise ValueError(f"{where}: {path!r} is not UTF-8 text: {exc}") from exc
        except RecursionError as exc:
            raise ValueError(f"{where}: {path!r} nests too deeply to read") from exc
    if not isinstance(loaded, Mapping):
        raise ValueError(f"{where}: {path!r} must hold {what}; got {type(loaded).__name__}")
    return loaded


def _kinematics_section(config: Mapping) -> Mapping:
    """cuRobo's ``robot_cfg: kinematics:`` section of a configuration, or the configuration itself where it
    is that section already (it has ``collision_spheres``)."""
    section: Any = config
    for key in ("robot_cfg", "kinematics"):
        if isinstance(section, Mapping) and "collision_spheres" not in section and key in section:
            section = section[key]
    if not isinstance(section, Mapping) or "collision_spheres" not in section:
        raise ValueError(
            "config has no collision_spheres (looked in robot_cfg.kinematics, kinematics and at the top level)"
        )
    return section


def _sphere_table(spheres: Any, root: str | None) -> dict[str, list]:
    """``collision_spheres`` (inline, a file, or Isaac Sim's list of one-link mappings; None: no spheres) as
    ``{link: [entries]}`` in order."""
    where = "collision_spheres"
    if spheres is None:
        return {}
    if isinstance(spheres, (str, os.PathLike)):
        path = os.fspath(spheres)
        if root is not None and not os.path.isabs(path):
            path = os.path.join(root, path)
        if not os.path.isfile(path):
            raise ValueError(f"{where}: no such spheres file {path!r} (root: {root!r})")
        loaded = _yaml_mapping(path, where, "a mapping of links to spheres")
        if "collision_spheres" not in loaded:
            raise ValueError(f"{where}: the spheres file {path!r} has no collision_spheres key")
        inner = loaded["collision_spheres"]
        if inner is None or isinstance(inner, (str, os.PathLike)):
            raise ValueError(
                f"{where}: the spheres file {path!r} must give the spheres themselves under collision_spheres "
                f"(a spheres file does not refer to another, nor to itself); got {inner!r:.80}"
            )
        return _sphere_table(inner, None)
    items: list[tuple[Any, Any]] = []
    if isinstance(spheres, Mapping):
        items = list(spheres.items())
    elif isinstance(spheres, list) and all(isinstance(e, Mapping) for e in spheres):
        items = [item for entry in spheres for item in entry.items()]
    else:
        raise ValueError(
            f"{where} must map links to lists of spheres (or be a spheres file's path); got "
            f"{type(spheres).__name__}"
        )
    table: dict[str, list] = {}
    for link, entries in items:
        if not isinstance(link, str):
            raise ValueError(f"{where}: link names must be strings; got {link!r}")
        if link in table:
            raise ValueError(f"{where}: link {link!r} is given twice")
        if entries is None:
            entries = []
        if not isinstance(entries, list):
            raise ValueError(
                f"{where}[{link!r}] must be a list of spheres ({{center: [x, y, z], radius: r}}); got "
                f"{type(entries).__name__}"
            )
        table[link] = entries
    return table


def _sphere(entry: Any, link: str, n: int) -> list[float]:
    """One sphere ``{center: [x, y, z], radius: r}`` as ``[x, y, z, r]``; ValueError naming link and entry."""
    where = f"collision_spheres[{link!r}][{n}]"
    if not isinstance(entry, Mapping):
        raise ValueError(f"{where} must be {{center: [x, y, z], radius: r}}; got {entry!r:.80}")
    unknown = [key for key in entry if key not in _SPHERE_FIELDS]
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r} (a sphere has 'center' and 'radius')")
    for key in _SPHERE_FIELDS:
        if entry.get(key) is None:
            raise ValueError(f"{where}: no {key!r} (a sphere is {{center: [x, y, z], radius: r}})")
    center = entry["center"]
    try:
        if isinstance(center, (str, bytes, Mapping)):
            raise TypeError
        values = np.asarray(center, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{where}: 'center' must be three finite numbers; got {center!r:.80}") from None
    if values.shape != (3,) or not np.isfinite(values).all() or np.abs(values).max() > _FLOAT32_MAX:
        raise ValueError(
            f"{where}: 'center' must be three finite numbers within float32's range; got {center!r:.80}"
        )
    radius = entry["radius"]
    if isinstance(radius, bool) or not isinstance(radius, (int, float, np.integer, np.floating)):
        raise ValueError(f"{where}: 'radius' must be a number; got {radius!r:.60}")
    return [*values.tolist(), _float_value(radius, f"{where}: 'radius'")]


def _extra_spheres(extra: Any) -> dict[str, int]:
    where = "extra_collision_spheres"
    if extra is None:
        return {}
    if not isinstance(extra, Mapping):
        raise ValueError(f"{where} must map links to counts; got {type(extra).__name__}")
    counts = {}
    for link, count in extra.items():
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise ValueError(f"{where}[{link!r}] must be a count (an int >= 0); got {count!r:.60}")
        if count > MAX_EXTRA_SPHERES:
            raise ValueError(
                f"{where}[{link!r}] must be at most {MAX_EXTRA_SPHERES} (disabled slots for an attached "
                f"object); got {count}"
            )
        counts[str(link)] = int(count)
    return counts


def _collision_links(names: Any, table: dict[str, list], extra: dict[str, int]) -> list[str]:
    """The links checked, in order: ``collision_link_names`` where given, else the spheres' links."""
    if names is None:
        return list(table) + [link for link in extra if link not in table]
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        raise ValueError(f"collision_link_names must be a list of link names; got {type(names).__name__}")
    seen: set[str] = set()
    for name in names:
        if not isinstance(name, str):
            raise TypeError(
                f"collision_link_names must hold link names; got {type(name).__name__} {name!r:.60}"
            )
        if name not in table and name not in extra:
            raise ValueError(
                f"collision_link_names names {name!r}, which has no collision_spheres (nor "
                "extra_collision_spheres)"
            )
        if name in seen:
            raise ValueError(f"collision_link_names names {name!r} twice")
        seen.add(name)
    return list(names)


def _buffers(buffers: Any) -> dict[str, float]:
    where = "self_collision_buffer"
    if buffers is None:
        return {}
    if not isinstance(buffers, Mapping):
        raise TypeError(f"{where} must map links to metres; got {type(buffers).__name__}")
    found = {}
    for link, value in buffers.items():
        found[str(link)] = _float_value(value, f"{where}[{link!r}]")
    return found


def _ignored_links(ignore: Any) -> list[tuple[str, str]]:
    where = "self_collision_ignore"
    if ignore is None:
        return []
    if not isinstance(ignore, Mapping):
        raise TypeError(f"{where} must map links to lists of links; got {type(ignore).__name__}")
    pairs = []
    for link, others in ignore.items():
        if others is None:
            continue
        if not isinstance(others, (list, tuple)):
            raise TypeError(f"{where}[{link!r}] must be a list of link names; got {others!r:.60}")
        for other in others:
            if not isinstance(other, str):
                raise TypeError(f"{where}[{link!r}] must hold link names; got {other!r:.60}")
            pairs.append((str(link), other))
    return pairs
