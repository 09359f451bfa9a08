"""Loading the user's dataset spec file (loadtune/engine/spec.py): the dataset and its optional hooks,
and every mistake in the file named by its file and line."""

from __future__ import annotations

import itertools
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from loadtune.engine.spec import LoadedSpec, SpecError, SpecRef, from_objects, load_spec, module_name_for

_counter = itertools.count()


@pytest.fixture
def write_spec(tmp_path):
    """Write a spec file with a module name unique to this test; forget the modules afterwards."""
    made: list[str] = []
    path_before = list(sys.path)

    def write(source: str, stem: str | None = None) -> Path:
        stem = stem or f"lt_spec_{next(_counter)}_{tmp_path.name.replace('-', '_')}"
        path = tmp_path / f"{stem}.py"
        path.write_text(textwrap.dedent(source))
        made.append(module_name_for(path))
        return path

    yield write
    for name in made:
        module = sys.modules.get(name)
        if module is not None and str(tmp_path) in str(getattr(module, "__file__", "")):
            del sys.modules[name]
    sys.path[:] = path_before


SQUARES = textwrap.dedent(
    """
    import torch
    from torch.utils.data import Dataset

    class Squares(Dataset):
        def __init__(self, n=10):
            self.n = n
        def __len__(self):
            return self.n
        def __getitem__(self, i):
            return torch.tensor([float(i * i)])
    """
)


def test_dataset_factory_function(write_spec):
    path = write_spec(SQUARES + "\ndef dataset():\n    return Squares(7)\n")
    spec = load_spec(path)
    assert isinstance(spec, LoadedSpec)
    assert len(spec.dataset) == 7
    assert spec.length == 7
    assert not spec.iterable
    assert spec.dataset[3].item() == 9.0
    assert spec.collate_fn is None and spec.step is None
    assert spec.defaults == {}
    assert spec.ref == SpecRef(str(path.resolve()), "dataset")


def test_module_level_dataset_object(write_spec):
    path = write_spec(SQUARES + "\ndataset = Squares(5)\n")
    spec = load_spec(str(path))
    assert type(spec.dataset).__name__ == "Squares"
    assert spec.length == 5
    # the object itself, not something it returned when called
    assert spec.dataset is sys.modules[spec.module_name].dataset


def test_factory_selected_after_colon(write_spec):
    path = write_spec(
        SQUARES
        + """
def dataset():
    return Squares(3)

def make_train_set():
    return Squares(11)
"""
    )
    spec = load_spec(f"{path}:make_train_set")
    assert spec.length == 11
    assert spec.ref.factory == "make_train_set"
    assert str(spec.ref).endswith(":make_train_set")
    # the default factory is still the plain one
    assert load_spec(path).length == 3


def test_specref_parse_without_factory_keeps_default():
    ref = SpecRef.parse("some/dir/data.py")
    assert ref.factory == "dataset"
    assert ref.path == str(Path("some/dir/data.py").resolve())
    assert str(ref) == ref.path


def test_optional_hooks_and_defaults_picked_up(write_spec):
    path = write_spec(
        SQUARES
        + """
def dataset():
    return Squares(4)

def collate_fn(items):
    return torch.cat(items)

def step(batch):
    return batch.sum()

loadtune = {"batch_size": 16, "workers": [0, 2]}
"""
    )
    spec = load_spec(path)
    module = sys.modules[spec.module_name]
    assert spec.collate_fn is module.collate_fn
    assert spec.step is module.step
    assert spec.defaults == {"batch_size": 16, "workers": [0, 2]}
    # defaults are a copy: changing them does not change the module's dict
    spec.defaults["batch_size"] = 1
    assert module.loadtune["batch_size"] == 16
    batch = spec.collate_fn([spec.dataset[i] for i in range(4)])
    assert batch.tolist() == [0.0, 1.0, 4.0, 9.0]


def test_module_registered_under_stem_and_folder_on_sys_path(write_spec, tmp_path):
    path = write_spec(SQUARES + "\ndef dataset():\n    return Squares(2)\n")
    spec = load_spec(path)
    assert spec.module_name == path.stem
    module = sys.modules[path.stem]
    assert Path(module.__file__).resolve() == path.resolve()
    assert str(path.resolve().parent) in sys.path
    # classes defined in the spec are importable by their qualified name, as pickle needs
    assert type(spec.dataset).__module__ == path.stem
    # loading again reads the file as it is now (a notebook re-run after an edit), and re-registers it
    path.write_text(SQUARES + "\ndef dataset():\n    return Squares(5)\n")
    again = load_spec(path)
    assert again.length == 5
    assert sys.modules[path.stem] is not module and type(again.dataset).__module__ == path.stem


def test_non_identifier_stem_gets_a_valid_module_name(write_spec):
    path = write_spec(SQUARES + "\ndef dataset():\n    return Squares(2)\n", stem=f"my-spec-{next(_counter)}")
    spec = load_spec(path)
    assert spec.module_name.isidentifier()
    assert spec.module_name in sys.modules


def test_module_name_taken_by_another_module_is_refused(write_spec):
    path = write_spec(SQUARES + "\ndef dataset():\n    return Squares(2)\n", stem="json")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "json" in str(info.value) and "rename" in str(info.value)
    assert sys.modules["json"].__file__ != str(path)


@pytest.mark.slow
def test_spawn_workers_unpickle_dataset_defined_in_spec(write_spec):
    path = write_spec(
        """
        import torch
        from torch.utils.data import Dataset

        class Cubes(Dataset):
            def __len__(self):
                return 10
            def __getitem__(self, i):
                return torch.tensor([i, i ** 3])

        def dataset():
            return Cubes()
        """
    )
    spec = load_spec(path)
    loader = DataLoader(spec.dataset, batch_size=4, num_workers=1, multiprocessing_context="spawn")
    batches = list(loader)
    assert [b.shape[0] for b in batches] == [4, 4, 2]
    rows = torch.cat(batches).tolist()
    assert rows == [[i, i**3] for i in range(10)]


# ---------------------------------------------------------------- errors


def test_missing_file(tmp_path):
    path = tmp_path / "nowhere_to_be_found.py"
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(path) in str(info.value)
    assert "no such spec file" in str(info.value)


def test_directory_is_not_a_spec(tmp_path):
    with pytest.raises(SpecError) as info:
        load_spec(tmp_path)
    assert "not a file" in str(info.value)


def test_syntax_error_names_file_and_line(write_spec):
    path = write_spec(
        """
        import torch

        def dataset():
            return [1, 2, 3

        x = 1
        """
    )
    bad_line = next(i for i, text in enumerate(path.read_text().splitlines(), 1) if "[1, 2, 3" in text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    err = info.value
    assert "syntax error" in str(err)
    assert str(path.resolve()) in str(err)
    assert err.line is not None
    # Python reports an unclosed bracket at the bracket's line
    assert err.line == bad_line
    assert f":{bad_line}:" in str(err)
    assert path.stem not in sys.modules


def test_syntax_error_simple_line(write_spec):
    path = write_spec("a = 1\nb = 2\nc = = 3\nd = 4\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert f"{path.resolve()}:3:" in str(info.value)
    assert info.value.line == 3


def test_exception_at_import_names_line(write_spec):
    path = write_spec("import torch\n\nvalue = 1\nraise RuntimeError('boom at import')\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert "RuntimeError" in msg and "boom at import" in msg
    assert info.value.line == 4
    assert f"{path.resolve()}:4:" in msg
    # a failed import leaves no half-initialised module behind
    assert path.stem not in sys.modules


def test_sys_exit_at_import_is_a_spec_error(write_spec):
    path = write_spec("import sys\n\nsys.exit(1)\n")  # a training script's entry point, unguarded
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "sys.exit(1)" in str(info.value) and "__main__" in str(info.value) and info.value.line == 3
    assert path.stem not in sys.modules


def test_import_error_in_called_helper_names_deepest_spec_line(write_spec):
    path = write_spec("def helper():\n    return 1 / 0\n\nx = helper()\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "ZeroDivisionError" in str(info.value)
    assert info.value.line == 2


def test_no_dataset_defined(write_spec):
    path = write_spec("x = 1\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert str(path.resolve()) in msg
    assert "'dataset'" in msg and "define dataset()" in msg


def test_named_factory_missing(write_spec):
    path = write_spec(SQUARES + "\ndef dataset():\n    return Squares(2)\n")
    with pytest.raises(SpecError) as info:
        load_spec(f"{path}:make_val_set")
    assert "'make_val_set'" in str(info.value)


def test_factory_raising_names_line(write_spec):
    path = write_spec("def dataset():\n    x = 1\n    raise ValueError('no data here')\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert "dataset() raised ValueError: no data here" in msg
    assert info.value.line == 3
    assert f"{path.resolve()}:3:" in msg


def test_dataset_of_length_zero(write_spec):
    path = write_spec(SQUARES + "\ndef dataset():\n    return Squares(0)\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "length 0" in str(info.value)
    assert str(path.resolve()) in str(info.value)


def test_factory_returning_non_dataset(write_spec):
    path = write_spec("def dataset():\n    return 42\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "int" in str(info.value) and "not a Dataset" in str(info.value)


def test_len_raising_names_line(write_spec):
    path = write_spec(
        """
        from torch.utils.data import Dataset

        class Broken(Dataset):
            def __len__(self):
                raise OSError('index file gone')
            def __getitem__(self, i):
                return i

        def dataset():
            return Broken()
        """
    )
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert "OSError" in str(info.value) and "index file gone" in str(info.value)
    assert info.value.line == 6


def test_loadtune_not_a_dict(write_spec):
    path = write_spec(SQUARES + "\ndef dataset():\n    return Squares(2)\n\nloadtune = [('batch_size', 8)]\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert "'loadtune' must be a dict" in msg and "list" in msg
    assert str(path.resolve()) in msg


@pytest.mark.parametrize("hook", ["collate_fn", "step"])
def test_non_callable_hook(write_spec, hook):
    path = write_spec(SQUARES + f"\ndef dataset():\n    return Squares(2)\n\n{hook} = 'not a function'\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert f"'{hook}' must be callable" in msg and "str" in msg


def test_iterable_dataset_accepted_without_len(write_spec):
    path = write_spec(
        """
        from torch.utils.data import IterableDataset

        class Stream(IterableDataset):
            def __iter__(self):
                return iter(range(3))

        def dataset():
            return Stream()
        """
    )
    spec = load_spec(path)
    assert spec.iterable
    assert spec.length is None


def test_from_objects():
    class Tiny(Dataset):
        def __len__(self):
            return 3

        def __getitem__(self, i):
            return i

    spec = from_objects(Tiny())
    assert spec.length == 3 and spec.ref is None
    with pytest.raises(SpecError, match="length 0"):
        from_objects([])


def test_spec_can_import_a_sibling_module(write_spec, tmp_path):
    helper = f"lt_helper_{next(_counter)}"
    (tmp_path / f"{helper}.py").write_text("SIZE = 6\n")
    path = write_spec(SQUARES + f"\nimport {helper}\n\ndef dataset():\n    return Squares({helper}.SIZE)\n")
    try:
        assert load_spec(path).length == 6
    finally:
        sys.modules.pop(helper, None)


def test_syntax_error_in_imported_helper_names_the_helper(write_spec, tmp_path):
    helper = f"lt_bad_helper_{next(_counter)}"
    (tmp_path / f"{helper}.py").write_text("ok = 1\nx = = 2\n")
    path = write_spec(f"import os\nimport {helper}\n\ndef dataset():\n    return [1]\n")
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert f"{helper}.py" in msg and "2" in msg.split(f"{helper}.py", 1)[1]


# ---------------------------------------------------------------- options' name, per-factory hooks


def test_loadtune_options_and_the_old_name(write_spec):
    new = load_spec(write_spec(SQUARES + "\nimport loadtune\n\ndataset = Squares(4)\nloadtune_options = {'batch_size': 8}\n"))
    assert new.defaults == {"batch_size": 8} and new.notes == []  # `import loadtune` is not taken for options
    old = load_spec(write_spec(SQUARES + "\ndataset = Squares(4)\nloadtune = {'batch_size': 8}\n"))
    assert old.defaults == {"batch_size": 8} and "deprecated" in old.notes[0] and "loadtune_options" in old.notes[0]
    with pytest.raises(SpecError, match="both loadtune_options and loadtune"):
        load_spec(write_spec(SQUARES + "\ndataset = Squares(4)\nloadtune = {}\nloadtune_options = {}\n"))
    with pytest.raises(SpecError, match="'loadtune_options' must be a dict"):
        load_spec(write_spec(SQUARES + "\ndataset = Squares(4)\nloadtune_options = 3\n"))


def test_a_factory_finds_its_own_hooks_by_name(write_spec):
    path = write_spec(SQUARES + """
from torch.utils.data import SequentialSampler

def dataset():
    return Squares(8)

def collate_fn(items):
    return torch.cat(items)

def loader_kwargs():
    return {"sampler": SequentialSampler(range(8))}

loadtune_options = {"batch_size": 4, "workers": [0]}

def make_val():
    return Squares(3)

def make_val_collate_fn(items):
    return torch.stack(items)

make_val_loader_kwargs = None  # none for this factory, whatever the module defines
make_val_options = {"batch_size": 2}
""")
    train = load_spec(path)
    assert train.collate_fn is sys.modules[train.module_name].collate_fn
    assert train.loader_args == ("sampler",) and train.own_order
    val = load_spec(f"{path}:make_val")  # the file read again: a module of its own
    assert val.collate_fn is sys.modules[val.module_name].make_val_collate_fn
    assert val.loader_kwargs is None and not val.own_order
    assert val.defaults == {"batch_size": 2, "workers": [0]}  # its own options over the module's


# ---------------------------------------------------------------- the whole loader: loader_kwargs


BUCKETS = SQUARES + """
import torch.utils.data as tud

class Pairs(tud.Sampler):
    batch_size = 2
    def __iter__(self):
        return iter([[0, 1], [2, 3], [4]])
    def __len__(self):
        return 3

def dataset():
    return Squares(5)
"""


def test_loader_kwargs_with_a_batch_sampler(write_spec):
    spec = load_spec(write_spec(BUCKETS + "\ndef loader_kwargs():\n    return {'batch_sampler': Pairs(), 'timeout': 5}\n"))
    assert spec.loader_args == ("batch_sampler", "timeout") and spec.own_order
    assert not spec.batch_knob and spec.batch_size == 2  # the sampler batches: its size is read, not searched
    loader = spec.build_loader({"batch_size": 64, "num_workers": 0, "pin_memory": False})
    assert [b.shape[0] for b in loader] == [2, 2, 1]
    assert loader.timeout == 0  # PyTorch refuses a timeout without workers: it applies from num_workers=1
    assert spec.build_loader({"batch_size": 64, "num_workers": 1, "pin_memory": False}).timeout == 5


@pytest.mark.parametrize("kwargs, message", [
    ("{'num_workers': 4}", "loader_kwargs sets num_workers, which loadtune searches"),
    ("{'shuffle': True}", "a scan option"),
    ("{'no_such_arg': 1}", "which DataLoader does not accept"),
    ("{'sampler': Pairs(), 'batch_sampler': Pairs()}", "both a sampler and a batch_sampler"),
    ("{'collate_fn': collate_fn}", "collate_fn is given twice"),
    ("[1, 2]", "must give a dict"),
])
def test_loader_kwargs_mistakes(write_spec, kwargs, message):
    source = BUCKETS + f"\ndef collate_fn(items):\n    return items\n\ndef loader_kwargs():\n    return {kwargs}\n"
    with pytest.raises(SpecError, match=message):
        load_spec(write_spec(source))


# ---------------------------------------------------------------- the whole loader: a factory, a DataLoader, a DataModule


FACTORY = SQUARES + """
from torch.utils.data import DataLoader, SequentialSampler

def seed_worker(worker_id):
    pass

def loader(batch_size=16, **knobs):
    return DataLoader(Squares(40), batch_size=batch_size, sampler=SequentialSampler(range(40)), worker_init_fn=seed_worker, **knobs)
"""


def test_loader_factory_is_read_when_there_is_no_dataset(write_spec):
    spec = load_spec(write_spec(FACTORY))
    assert spec.form == "factory" and spec.name == "loader" and spec.length == 40 and spec.own_order
    assert spec.batch_knob and spec.batch_size == 16  # it names batch_size: searched, from its default
    built = spec.build_loader({"batch_size": 8, "num_workers": 2, "pin_memory": False, "prefetch_factor": 3,
                               "persistent_workers": True})
    assert (built.batch_size, built.num_workers, built.prefetch_factor, built.persistent_workers) == (8, 2, 3, True)


def test_a_factory_that_ignores_its_knobs_is_refused(write_spec):
    from loadtune.engine.spec import check_knobs

    spec = load_spec(write_spec(SQUARES + """
from torch.utils.data import DataLoader

def loader(**knobs):
    return DataLoader(Squares(8), batch_size=4, num_workers=0)
"""))
    assert check_knobs(spec, [{"batch_size": 4, "num_workers": 0, "pin_memory": False}]) == []  # nothing to tell at w0
    with pytest.raises(SpecError, match=r"loader\(\) ignores the knobs.*num_workers=2 \(the loader has 0\)"):
        check_knobs(spec, [{"batch_size": 4, "num_workers": 2, "pin_memory": False, "prefetch_factor": 2,
                            "persistent_workers": False}])


def test_a_factory_must_return_something_iterable(write_spec):
    with pytest.raises(SpecError, match=r"loader\(\*\*knobs\) returned int, which cannot be iterated"):
        load_spec(write_spec("def loader(**knobs):\n    return 3\n"))
    with pytest.raises(SpecError, match=r"loader\(\*\*knobs\) raised KeyError"):
        load_spec(write_spec("def loader(**knobs):\n    return {}['nope']\n"))


def test_a_dataloader_is_rebuilt_with_the_knobs_keeping_the_rest(write_spec):
    path = write_spec(SQUARES + """
from torch.utils.data import DataLoader, SubsetRandomSampler

def keep(items):
    return torch.cat(items)

def seed_worker(worker_id):
    pass

train_loader = DataLoader(Squares(10), batch_size=4, sampler=SubsetRandomSampler([1, 3, 5]), collate_fn=keep,
                          worker_init_fn=seed_worker, num_workers=3, persistent_workers=True, drop_last=False)
""")
    spec = load_spec(f"{path}:train_loader")
    module = sys.modules[spec.module_name]
    assert spec.form == "dataloader" and spec.batch_size == 4
    assert spec.current == {"num_workers": 3, "pin_memory": False, "prefetch_factor": 2, "persistent_workers": True,
                            "batch_size": 4}  # the settings it was made with: the user's current ones
    built = spec.build_loader({"batch_size": 2, "num_workers": 0, "pin_memory": False})
    assert built.num_workers == 0 and built.batch_size == 2 and built.sampler is module.train_loader.sampler
    assert built.collate_fn is module.keep and built.worker_init_fn is module.seed_worker
    assert sorted(torch.cat(list(built)).tolist()) == [1.0, 9.0, 25.0]  # its own sampler's subset, its own collate


DATAMODULE = SQUARES + """
from torch.utils.data import DataLoader

CALLS = []

class Module:  # shaped like a LightningDataModule (the real one is tested in test_loader_forms.py)
    def prepare_data(self):
        CALLS.append("prepare_data")
    def setup(self, stage):
        CALLS.append(stage)
        self.train = Squares(12)
    def train_dataloader(self):
        return DATALOADER(self.train, batch_size=3, shuffle=True)

DATALOADER = DataLoader
"""


def test_a_datamodule_is_set_up_and_its_train_loader_rebuilt(write_spec):
    path = write_spec(DATAMODULE)
    spec = load_spec(f"{path}:Module")
    module = sys.modules[spec.module_name]
    assert spec.form == "datamodule" and spec.owner == "Module" and module.CALLS == ["prepare_data", "fit"]
    assert spec.current == {"num_workers": 0, "pin_memory": False, "batch_size": 3} and spec.batch_knob
    load_spec(f"{path}:Module", prepare_data=False)  # as a trial process loads it: no second download
    assert sys.modules[spec.module_name].CALLS == ["fit"]
    built = spec.build_loader({"batch_size": 5, "num_workers": 0, "pin_memory": False})
    assert [len(b) for b in built] == [5, 5, 2]


@pytest.mark.parametrize("change, message", [
    ("self.train = open('/nonexistent/x').read()", r':\d+: Module.setup\("fit"\) raised FileNotFoundError'),
    ("DATALOADER = lambda *a, **k: [1, 2]", r"Module.train_dataloader\(\) returned list, not a DataLoader"),
])
def test_datamodule_mistakes(write_spec, change, message):
    source = DATAMODULE.replace("self.train = Squares(12)", change) if "self.train" in change else DATAMODULE + change + "\n"
    with pytest.raises(SpecError, match=message):
        load_spec(f"{write_spec(source)}:Module")


def test_dataset_with_keyword_arguments_stays_a_dataset_factory(write_spec):
    path = write_spec(SQUARES + "\ndef dataset(**kwargs):\n    return Squares(**kwargs)\n\ndef make_val(**kwargs):\n    return Squares(3)\n")
    assert load_spec(path).form == "dataset"
    with pytest.raises(SpecError, match=r"make_val\(\*\*knobs\) returned a Squares, a dataset: .* read as a loader factory"):
        load_spec(f"{path}:make_val")
