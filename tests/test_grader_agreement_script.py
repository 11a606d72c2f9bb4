"""benchmarks/grader_agreement.py selects exactly the default-setting cases of a Math-Verify-style test folder."""



# A made-up test folder in the shape of Math-Verify's: a helper with settings, tests that use it in several ways.
HELPER = '''
def compare_strings(gold, pred, match_types=["latex", "expr"], precision=6, strict=True,
                    allow_set_relation_comp=False):
    return 1
'''
TESTS = '''
import pytest
from math_verify import parse, verify
from tests.test_helper import compare_strings

@pytest.mark.parametrize("gold,pred,expected", [("1", "1", 1), ("2", "3", 0)])
def test_default(gold, pred, expected):
    assert compare_strings(gold, pred, match_types=["latex", "expr"]) == expected

@pytest.mark.parametrize("gold,pred,expected", [("4", "4", 1)])
def test_latex_only(gold, pred, expected):
    assert compare_strings(gold, pred, match_types=["latex"]) == expected

@pytest.mark.parametrize("gold,pred,expected,precision", [("5", "5", 1, 6), ("6", "6", 1, 3)])
def test_precision(gold, pred, expected, precision):
    assert compare_strings(gold, pred, precision=precision) == expected

@pytest.mark.parametrize("gold,pred,strict,expected", [("7", "7", True, 1), ("8", "8", False, 1)])
def test_strict(gold, pred, strict, expected):
    assert compare_strings(gold, pred, strict=strict) == expected

@pytest.mark.parametrize("gold,pred,result", [("9", "9", 1)])
def test_plain(gold, pred, result):
    assert int(verify(parse(gold), parse(pred))) == result

@pytest.mark.parametrize("gold,pred,result", [("10", "10", 1)])
def test_not_plain(gold, pred, result):
    assert int(verify(parse(gold), parse(pred), float_rounding=2)) == result
'''


def test_collect_cases_keeps_only_default_settings(tmp_path, load_script):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "__init__.py").write_text("")
    (tests / "test_helper.py").write_text(HELPER)
    (tests / "test_cases.py").write_text(TESTS)
    cases = load_script("benchmarks/grader_agreement.py", "grader_agreement").collect_cases(tests)
    assert sorted((c["gold"], c["expected"]) for c in cases) == [("1", 1), ("2", 0), ("5", 1), ("7", 1), ("9", 1)]
