"""Writes tests/verifiers/data/math_heldout_like.jsonl.

Handwritten (gold, answer, label) triples, each put inside a full model response in one of several styles
(Qwen/R1 <think>, Llama "The final answer is", Minerva, <answer> tags, GSM8K ####, ...), plus responses written
out whole for the extraction cases. Cases real graders would disagree on were left out.

    python tests/verifiers/data/make_math_heldout_like.py tests/verifiers/data/math_heldout_like.jsonl
"""
import json, sys

# (category, gold, answer_latex, expected)
C = []
def add(cat, rows):
    for g, a, e in rows:
        C.append((cat, g, a, e))

add("integer_basic", [
    ("42", "42", True), ("42", "+42", True), ("42", "42.0", True), ("42", "43", False), ("42", "4.2", False),
    ("-17", "-17", True), ("-17", "17", False), ("0", "0", True), ("0", "0.00", True), ("0", "1", False),
    ("2024", "2024", True), ("2024", "2025", False), ("-1", "−1", True), ("8", "\\text{8}", True),
    ("120", "5!", True), ("64", "2^6", True), ("64", "2^7", False),
])
add("fraction", [
    ("\\frac{3}{4}", "3/4", True), ("\\frac{3}{4}", "\\frac{6}{8}", True), ("\\frac{3}{4}", "\\frac{4}{3}", False),
    ("-\\frac{2}{5}", "\\frac{-2}{5}", True), ("-\\frac{2}{5}", "\\frac{2}{-5}", True), ("-\\frac{2}{5}", "\\frac{2}{5}", False),
    ("\\frac{1}{2}", "\\frac12", True), ("\\frac{1}{2}", "1/2", True), ("\\frac{7}{12}", "\\dfrac{7}{12}", True),
    ("\\frac{7}{12}", "\\tfrac{7}{12}", True), ("\\frac{7}{12}", "\\frac{7}{13}", False), ("\\dfrac{5}{9}", "5/9", True),
    ("\\frac{13}{6}", "\\frac{26}{12}", True), ("\\frac{13}{6}", "\\frac{6}{13}", False), ("\\frac{100}{3}", "33\\frac{1}{3}", True),
    ("\\frac{9}{2}", "\\frac92", True), ("\\frac{1}{8}", "\\frac18", True), ("\\frac{1}{8}", "\\frac{1}{6}", False),
])
add("decimal_vs_fraction", [
    ("\\frac{1}{2}", "0.5", True), ("0.5", "\\frac{1}{2}", True), ("0.5", "\\frac{1}{5}", False), ("\\frac{3}{8}", "0.375", True),
    ("\\frac{3}{8}", "0.38", False), ("\\frac{1}{3}", "0.3", False), ("\\frac{1}{3}", "0.33333", True), ("\\frac{5}{4}", "1.25", True),
    ("1.25", "\\frac{5}{4}", True), ("1.25", "\\frac{4}{5}", False), ("\\frac{2}{3}", "0.6667", True), ("\\frac{7}{4}", "1.75", True),
    ("2.5", "\\frac{5}{2}", True), ("2.5", "2.05", False), ("0.125", "\\frac{1}{8}", True), ("0.2", "\\frac{1}{4}", False),
    ("\\frac{1}{20}", "0.05", True), ("\\frac{1}{20}", "0.5", False), ("3.75", "\\frac{15}{4}", True), ("3.75", "3.7", False),
])
add("close_number", [
    ("3.14", "3.15", False), ("1000", "1001", False), ("99", "99.5", False), ("12.5", "12.05", False), ("1.5", "15", False),
    ("2.50", "2.5", True), ("0.001", "0.01", False), ("256", "265", False), ("7.2", "7.20", True), ("5", "5.01", False),
    ("18", "17.99", False), ("0.75", "0.7", False), ("3.14159", "3.14", False),
])
add("wrong_sign", [
    ("-4", "4", False), ("4", "-4", False), ("-\\frac{1}{3}", "\\frac{1}{3}", False), ("-2\\sqrt{2}", "2\\sqrt{2}", False),
    ("-4", "-4", True), ("-\\frac{1}{3}", "-\\frac13", True), ("x - 5", "5 - x", False), ("-0.25", "-\\frac{1}{4}", True),
])
add("symbolic_simplify", [
    ("(x+2)^2", "x^2+4x+4", True), ("(x+2)^2", "x^2+4x+2", False), ("(x+2)^2", "x^2+4", False),
    ("\\frac{x+1}{x-1}", "\\frac{1+x}{-1+x}", True), ("\\frac{x+1}{x-1}", "\\frac{x-1}{x+1}", False),
    ("x^3-1", "(x-1)(x^2+x+1)", True), ("x^3-1", "(x-1)(x^2-x+1)", False), ("\\frac{1}{x^2}", "x^{-2}", True),
    ("a^2 b", "b a^2", True), ("a^2 b", "a b^2", False), ("3x+6", "3(x+2)", True), ("3x+6", "3(x+6)", False),
    ("\\frac{n(n-1)}{2}", "\\frac{n^2-n}{2}", True), ("\\frac{n(n-1)}{2}", "\\frac{n^2+n}{2}", False),
    ("2\\sin x\\cos x", "\\sin 2x", True), ("\\ln 8", "3\\ln 2", True), ("\\ln 8", "2\\ln 3", False),
    ("e^{2x}", "(e^x)^2", True), ("4x^2-9", "(2x-3)(2x+3)", True), ("4x^2-9", "(2x-3)^2", False),
    ("\\frac{2}{x+1}", "2/(x+1)", True), ("\\frac{2}{x+1}", "2/x+1", False),
])
add("pi_sqrt", [
    ("2\\sqrt{3}", "\\sqrt{12}", True), ("2\\sqrt{3}", "2\\sqrt3", True), ("2\\sqrt{3}", "3\\sqrt{2}", False),
    ("\\frac{\\sqrt{3}}{2}", "\\sqrt{3}/2", True), ("\\frac{\\sqrt{3}}{2}", "\\frac{1}{2}\\sqrt{3}", True), ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{2}}{2}", False),
    ("\\sqrt{2}", "\\sqrt2", True), ("\\frac{\\sqrt{3}}{3}", "\\frac{1}{\\sqrt{3}}", True), ("\\frac{\\sqrt{3}}{3}", "\\sqrt{3}", False),
    ("4\\pi", "4 \\pi", True), ("4\\pi", "4\\pi^2", False), ("\\frac{\\pi}{3}", "\\pi/3", True), ("\\frac{\\pi}{3}", "\\frac{\\pi}{6}", False),
    ("16\\pi", "16 π", True), ("\\pi r^2", "r^2\\pi", True), ("\\pi r^2", "2\\pi r", False), ("3+2\\sqrt{2}", "(1+\\sqrt{2})^2", True),
    ("3+2\\sqrt{2}", "3-2\\sqrt{2}", False), ("5\\sqrt{5}", "\\sqrt{125}", True), ("\\frac{9\\pi}{2}", "4.5\\pi", True),
    ("\\sqrt{5}", "5", False), ("\\frac{\\pi}{4}", "0.25\\pi", True),
])
add("set_list", [
    ("\\{1, 2, 3\\}", "\\{3, 2, 1\\}", True), ("\\{1, 2, 3\\}", "1, 2, 3", True), ("\\{1, 2, 3\\}", "\\{1, 2\\}", False),
    ("\\{1, 2\\}", "\\{1, 2, 3\\}", False), ("-2, 3", "3, -2", True), ("-2, 3", "3", False), ("-2, 3", "-3, 2", False),
    ("1, 2", "x=1 \\text{ or } x=2", True), ("1, 2", "x = 1, x = 2", True), ("\\{-1, 4\\}", "x \\in \\{4, -1\\}", True),
    ("0, 5, -5", "\\{-5, 0, 5\\}", True), ("0, 5, -5", "5, -5", False), ("\\{2\\}", "2", True), ("\\{2\\}", "2, 3", False),
    ("\\frac{1}{2}, 3", "3, 0.5", True), ("\\frac{1}{2}, 3", "3, 2", False),
])
add("interval_union", [
    ("[2, 5)", "[2,5)", True), ("[2, 5)", "[2, 5]", False), ("[2, 5)", "(2, 5)", False), ("(2, 5]", "[2, 5)", False),
    ("[2, 5)", "[5, 2)", False), ("(-\\infty, 3]", "\\left(-\\infty, 3\\right]", True), ("(-\\infty, 3]", "(-\\infty, 3)", False),
    ("(-\\infty, -1) \\cup (2, \\infty)", "(2, \\infty) \\cup (-\\infty, -1)", True),
    ("(-\\infty, -1) \\cup (2, \\infty)", "(-\\infty, -1]\\cup(2, \\infty)", False),
    ("(-\\infty, -1) \\cup (2, \\infty)", "(2, \\infty)", False),
    ("(0, 1) \\cup (1, 2)", "(0, 2)", False), ("[0, \\infty)", "[0,∞)", True), ("[0, \\infty)", "(0, \\infty)", False),
    ("[-3, 3]", "\\left[-3,3\\right]", True), ("[-3, 3]", "[-3, 3)", False), ("(-\\infty, \\infty)", "\\mathbb{R}", True),
    ("[1, 4]", "[1,4]", True), ("[1, 4]", "[1, 5]", False),
])
add("tuple_pair", [
    ("(3, 4)", "(3,4)", True), ("(3, 4)", "(4, 3)", False), ("(1, -2)", "\\left(1, -2\\right)", True), ("(1, -2)", "(1, 2)", False),
    ("\\left(\\frac{1}{2}, 3\\right)", "(0.5, 3)", True), ("\\left(\\frac{1}{2}, 3\\right)", "(3, 0.5)", False),
    ("(1, 2, 3)", "(1,2,3)", True), ("(1, 2, 3)", "(1, 3, 2)", False), ("(-1, 0)", "(-1,0)", True), ("(-1, 0)", "(0, -1)", False),
    ("(2, \\sqrt{3})", "(2, \\sqrt3)", True), ("(2, \\sqrt{3})", "(2, 3)", False),
])
add("matrix_vector", [
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{bmatrix}1\\\\2\\end{bmatrix}", True),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix}2\\\\1\\end{pmatrix}", False),
    ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", True),
    ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "\\begin{pmatrix}1&3\\\\2&4\\end{pmatrix}", False),
    ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&5\\end{pmatrix}", False),
    ("\\begin{pmatrix} \\frac{1}{2} & 0 \\\\ 0 & 2 \\end{pmatrix}", "\\begin{bmatrix}0.5&0\\\\0&2\\end{bmatrix}", True),
    ("\\begin{pmatrix} -3 \\\\ 0 \\\\ 5 \\end{pmatrix}", "\\begin{pmatrix} -3 \\\\ 0 \\\\ 5 \\end{pmatrix}", True),
    ("\\begin{pmatrix} -3 \\\\ 0 \\\\ 5 \\end{pmatrix}", "\\begin{pmatrix} 3 \\\\ 0 \\\\ -5 \\end{pmatrix}", False),
    ("\\begin{pmatrix} 2 & -1 \\\\ 0 & 1 \\end{pmatrix}", "\\left[\\begin{array}{cc}2&-1\\\\0&1\\end{array}\\right]", True),
])
add("equation", [
    ("x = 5", "5", True), ("5", "x = 5", True), ("x = 5", "x = -5", False), ("y = 2x + 3", "y = 3 + 2x", True),
    ("y = 2x + 3", "y = 2x - 3", False), ("x^2 + y^2 = 25", "y^2 + x^2 = 25", True), ("x^2 + y^2 = 25", "x^2 + y^2 = 5", False),
    ("2x - y = 4", "y = 2x - 4", True), ("2x - y = 4", "y = 2x + 4", False), ("k = \\frac{3}{2}", "k=1.5", True),
    ("a = 7", "7", True), ("n = 12", "n=13", False), ("y = -\\frac{1}{2}x + 4", "y=-0.5x+4", True), ("y = -\\frac{1}{2}x + 4", "y=0.5x+4", False),
])
add("inequality", [
    ("x > 3", "(3, \\infty)", True), ("x \\geq 3", "(3, \\infty)", False), ("x \\geq 3", "[3, \\infty)", True),
    ("-2 < x < 5", "(-2, 5)", True), ("-2 < x < 5", "[-2, 5]", False), ("x \\le 4", "x < 4", False), ("x \\le 4", "x \\leq 4", True),
    ("x \\geq 2", "2 \\le x", True), ("x < -1 \\text{ or } x > 2", "(-\\infty,-1)\\cup(2,\\infty)", True),
    ("x < -1 \\text{ or } x > 2", "(-\\infty,-1]\\cup[2,\\infty)", False), ("x ≤ 7", "x \\le 7", True), ("x > 0", "x < 0", False),
    ("1 \\le x \\le 6", "[1, 6]", True), ("1 \\le x \\le 6", "(1, 6]", False),
])
add("percentage", [
    ("25\\%", "25", True), ("25\\%", "25\\%", True), ("25\\%", "25 percent", True), ("25\\%", "2.5\\%", False), ("25\\%", "20\\%", False),
    ("40", "40\\%", True), ("12.5\\%", "12.5%", True), ("12.5\\%", "125\\%", False), ("60\\%", "60 \\%", True), ("60\\%", "40\\%", False),
])
add("units_text", [
    ("5", "5 \\text{ cm}", True), ("5 \\text{ cm}", "5 \\text{ m}", False), ("5 \\text{ cm}", "5\\,\\text{cm}", True),
    ("12 \\text{ cm}^2", "12", True), ("12 \\text{ cm}^2", "12 \\text{ m}^2", False), ("36", "36 \\text{ square units}", True),
    ("48", "\\$48", True), ("48", "48 \\text{ dollars}", True), ("48", "\\$84", False), ("3 \\text{ hours}", "3 hours", True),
    ("3 \\text{ hours}", "3 minutes", False), ("20 \\text{ km}", "20 \\text{ m}", False), ("9.5", "\\$9.50", True), ("15", "15\\text{ apples}", True),
    ("7 \\text{ kg}", "7 \\text{ g}", False), ("7 \\text{ kg}", "7\\mathrm{~kg}", True),
])
add("degrees", [
    ("30^\\circ", "30", True), ("30^\\circ", "30^{\\circ}", True), ("30^\\circ", "30°", True), ("30^\\circ", "30 \\text{ degrees}", True),
    ("30^\\circ", "60^\\circ", False), ("135", "135^\\circ", True), ("135", "145^\\circ", False), ("72^{\\circ}", "72\\degree", True),
])
add("plus_minus", [
    ("\\pm 3", "3, -3", True), ("\\pm 3", "\\{-3, 3\\}", True), ("\\pm 3", "3", False), ("\\pm 3", "±3", True),
    ("2 \\pm \\sqrt{5}", "2+\\sqrt{5}, 2-\\sqrt{5}", True), ("2 \\pm \\sqrt{5}", "2+\\sqrt{5}", False), ("-3, 3", "\\pm 3", True),
    ("1 \\pm i", "1+i, 1-i", True), ("\\pm 2", "\\pm 4", False),
])
add("infinity", [
    ("\\infty", "\\infty", True), ("\\infty", "+\\infty", True), ("\\infty", "-\\infty", False), ("\\infty", "∞", True),
    ("-\\infty", "-∞", True), ("[5, \\infty)", "[5, +\\infty)", True), ("\\infty", "0", False),
])
add("complex", [
    ("2 - 3i", "-3i + 2", True), ("2 - 3i", "2 + 3i", False), ("\\frac{1+i}{2}", "\\frac{1}{2} + \\frac{1}{2}i", True),
    ("i", "-i", False), ("1 + i\\sqrt{3}", "1 + \\sqrt{3}i", True), ("1 + i\\sqrt{3}", "1 - \\sqrt{3}i", False),
    ("-4i", "-4 i", True), ("3 + 4i", "5", False), ("5i", "5", False),
])
add("multiple_choice", [
    ("B", "B", True), ("B", "(B)", True), ("B", "\\text{(B)}", True), ("B", "\\textbf{(B)}", True), ("B", "C", False),
    ("B", "\\text{(D)}", False), ("D", "D", True), ("D", "(A)", False), ("E", "\\text{E}", True), ("A", "B", False),
])
add("text_answer", [
    ("\\text{even}", "\\text{even}", True), ("\\text{even}", "even", True), ("\\text{even}", "\\text{odd}", False),
    ("\\text{Yes}", "yes", True), ("\\text{Yes}", "\\text{No}", False), ("\\text{Tuesday}", "\\text{Tuesday}", True),
    ("\\text{Tuesday}", "Wednesday", False), ("\\text{North}", "\\text{north}", True), ("\\text{Alice}", "\\text{Bob}", False),
])
add("thousands_sep", [
    ("1234567", "1,234,567", True), ("1234567", "1,234,568", False), ("12000", "12{,}000", True), ("12000", "12\\,000", True),
    ("1000000", "1 000 000", True), ("1234.5", "1,234.5", True), ("1.234", "1,234", False), ("45000", "4,500", False),
    ("3,600", "3600", True), ("3,600", "360", False),
])
add("scientific", [
    ("300000", "3 \\times 10^{5}", True), ("300000", "3\\cdot10^5", True), ("300000", "3 \\times 10^{6}", False),
    ("2.5 \\times 10^{-3}", "0.0025", True), ("2.5 \\times 10^{-3}", "0.025", False), ("6.4 \\times 10^{7}", "64000000", True),
    ("6.4 \\times 10^{7}", "6.4 \\times 10^{6}", False), ("1.2 \\times 10^{4}", "12{,}000", True),
])
add("mixed_number", [
    ("3\\frac{1}{2}", "\\frac{7}{2}", True), ("3\\frac{1}{2}", "3.5", True), ("3\\frac{1}{2}", "3 \\frac12", True),
    ("3\\frac{1}{2}", "3\\frac{1}{3}", False), ("\\frac{7}{2}", "3\\frac{1}{2}", True), ("2\\frac{3}{4}", "\\frac{11}{4}", True),
    ("2\\frac{3}{4}", "\\frac{3}{2}", False), ("1\\frac{1}{3}", "1 1/3", True),
])
add("unicode_math", [
    ("\\frac{1}{2}", "½", True), ("\\sqrt{2}", "√2", True), ("\\frac{\\pi}{2}", "π/2", True), ("x^2 + 1", "x² + 1", True),
    ("-5", "−5", True), ("2\\pi", "2π", True), ("x^2 + 1", "x³ + 1", False), ("\\sqrt{3}", "√2", False), ("\\frac{3}{4}", "¾", True),
    ("2\\pi", "π", False),
])
add("latex_delimiters", [
    ("12", "\\left( 12 \\right)", True), ("\\frac{5}{6}", "\\displaystyle \\frac{5}{6}", True), ("7", "\\mathbf{7}", True),
    ("\\frac{5}{6}", "{\\frac{5}{6}}", True), ("10", "\\text{ }10", True), ("\\sqrt{7}", "\\sqrt{\\,7\\,}", True),
    ("\\frac{5}{6}", "\\displaystyle \\frac{6}{5}", False),
])

# ------------------------------------------------------------------ response styles
REASON = [
    "Let me set up the problem. Let $n$ be the unknown. From the first condition we get $2n + 1 = 19$ if we misread it, which gives $n=9$, but rereading the statement the relation is different.\nWorking carefully through the algebra and checking each step, everything is consistent.",
    "First, note that the quantity is symmetric. Trying small cases: $k=1$ gives $11$, $k=2$ gives $13$. These do not generalise, so we compute directly.\nAfter simplifying we obtain the value below.",
    "We begin by listing what is known. The sum of the three numbers is $27$ and one of them is $8$. Substituting and simplifying gives the result.",
]

def fmt(i, gold, ans):
    r = REASON[i % len(REASON)]
    style = i % 8
    if style == 0:  # Qwen / R1 with think, boxed
        return f"<think>\nOkay, let me think. Maybe it's 77? No wait. {r}\n</think>\n\nWe solve step by step.\n\n{r}\n\nTherefore, the answer is $\\boxed{{{ans}}}$."
    if style == 1:  # Llama "The final answer is"
        return f"## Step 1: Understand the problem\n{r}\n\n## Step 2: Compute\nCarrying out the computation.\n\nThe final answer is: $\\boxed{{{ans}}}$"
    if style == 2:  # Minerva
        return f"{r}\nFinal Answer: The final answer is ${ans}$. I hope it is correct."
    if style == 3:  # answer tags, raw content
        return f"<think>\n{r}\n</think>\n<answer>{ans}</answer>"
    if style == 4:  # R1 final answer display
        return f"<think>\nHmm, the tempting answer is $31$ but that ignores a case. {r}\n</think>\n\n{r}\n\n**Final Answer**\n\\[\n\\boxed{{{ans}}}\n\\]"
    if style == 5:  # answer tag with inline math
        return f"{r}\n\n<answer>${ans}$</answer>"
    if style == 6:  # The answer is $..$
        return f"{r}\n\nThe answer is ${ans}$."
    return f"{r}\n\nPutting it together, the result is $\\boxed{{{ans}}}$."

out = []
for i, (cat, g, a, e) in enumerate(C):
    out.append({"id": f"h{len(out):04d}", "gold": g, "output": fmt(i, g, a), "expected": e, "category": cat, "source": "handwritten", "note": f"answer: {a}"})

# ------------------------------------------------------------------ extraction-centred cases, written out
X = []
def ex(cat, gold, output, expected, note=""):
    X.append((cat, gold, output, expected, note))

# GSM8K ####
ex("gsm8k", "72", "Natalia sold 48 clips in April and half as many in May, 48/2 = 24.\nAltogether 48 + 24 = 72.\n#### 72", True)
ex("gsm8k", "72", "Natalia sold 48 clips in April and half as many in May, 48/2 = 24.\nAltogether 48 + 24 = 72.\n#### 74", False)
ex("gsm8k", "1200", "The total cost is 4 * 300 = $1,200.\n#### $1,200", True)
ex("gsm8k", "1200", "The total cost is 4 * 300 = $1,200.\n#### 1,200", True)
ex("gsm8k", "1200", "The total cost is 4 * 300 = 1200 dollars, minus a discount of 120 gives 1080.\n#### 1080", False)
ex("gsm8k", "18", "Janet's ducks lay 16 eggs. She eats 3 and bakes with 4, so 16 - 3 - 4 = 9 are sold at $2 each: 9 * 2 = 18.\n#### 18", True)
ex("gsm8k", "18", "16 - 3 - 4 = 9 eggs, 9 * 2 = 18 dollars.\n####", False, "empty #### line")
ex("gsm8k", "5", "He needs 20 / 4 = 5 boxes.\n\n#### 5.0", True)
ex("gsm8k", "0.5", "Each friend gets 1/2 of a pizza.\n#### 0.5", True)
ex("gsm8k", "3", "The train takes 180 / 60 = 3 hours.\n#### 3 hours", True)
# "The answer is" variants
ex("answer_is", "15", "There are 5 rows of 3 chairs, so 5 * 3 = 15 chairs. The answer is 15.", True)
ex("answer_is", "15", "There are 5 rows of 3 chairs, so 5 * 3 = 15 chairs. The answer is 16.", False)
ex("answer_is", "\\frac{3}{4}", "The probability of not drawing red is $1 - \\frac14$.\nSo the answer is $\\frac{3}{4}$.", True)
ex("answer_is", "\\frac{3}{4}", "The probability of drawing red is $\\frac14$.\nSo the answer is $\\frac{1}{4}$.", False)
ex("answer_is", "7", "Let's think step by step. 3 + 4 = 7. The answer is: 7", True)
ex("answer_is", "7", "Let's think step by step. 3 + 4 = 7. Therefore, the final answer is $7$.", True)
ex("answer_is", "24", "We multiply 4 by 6 to get 24.\n\nAnswer: 24", True)
ex("answer_is", "24", "We multiply 4 by 6 to get 24, then subtract 2.\n\nAnswer: 22", False)
ex("answer_is", "-3", "Solving $2x + 6 = 0$ gives $x = -3$.\n\n**Answer:** $x = -3$", True)
ex("answer_is", "-3", "Solving $2x + 6 = 0$ gives $x = -3$, and we need $|x|$.\n\n**Answer:** $3$", False)
# Minerva
ex("minerva", "2", "Since $f(1) = 2$, we have $\\boxed{2}$.\nFinal Answer: The final answer is $2$. I hope it is correct.", True)
ex("minerva", "\\frac{\\sqrt{2}}{2}", "We have $\\sin 45^\\circ = \\frac{\\sqrt{2}}{2}$.\nFinal Answer: The final answer is $\\frac{\\sqrt{2}}{2}$. I hope it is correct.", True)
ex("minerva", "\\frac{\\sqrt{2}}{2}", "We have $\\cos 30^\\circ = \\frac{\\sqrt{3}}{2}$.\nFinal Answer: The final answer is $\\frac{\\sqrt{3}}{2}$. I hope it is correct.", False)
ex("minerva", "10", "The number of diagonals of a pentagon is $\\frac{5\\cdot 2}{2}=5$, and of a hexagon... wait.\nFinal Answer: The final answer is $10$. I hope it is correct.", True)
ex("minerva", "5", "The number of diagonals of a pentagon is $5$; I computed the hexagon instead.\nFinal Answer: The final answer is $9$. I hope it is correct.", False)
# boxed inside sentences
ex("boxed_in_sentence", "15", "Adding the two parts, the total is \\boxed{15} dollars, which matches the check.", True)
ex("boxed_in_sentence", "15", "Adding the two parts gives 15, then tax makes the total \\boxed{16} dollars.", False)
ex("boxed_in_sentence", "\\frac{1}{6}", "There is one favourable outcome out of six, so the probability is $\\boxed{\\frac{1}{6}}$ and we are done.", True)
ex("boxed_in_sentence", "8", "Hence $x = \\boxed{8}$ is the only solution, since $x=-8$ is excluded by the domain.", True)
ex("boxed_in_sentence", "-8", "Hence $x = \\boxed{8}$ is the only solution, since $x=-8$ is excluded by the domain.", False)
ex("boxed_in_sentence", "4", "The area is \\(\\boxed{4}\\) square units.", True)
ex("boxed_in_sentence", "12", "The perimeter is $\\boxed{12\\text{ cm}}$, and the area is $9\\text{ cm}^2$.", True)
# hedging / box spam / empty tags
ex("hedging", "3", "The root could be \\boxed{3} or \\boxed{4}.", False)
ex("hedging", "3", "I am not sure. It is either $\\boxed{3}$ or $\\boxed{-3}$.", False)
ex("hedging", "5", "\\boxed{1} \\boxed{2} \\boxed{3} \\boxed{4} \\boxed{5} \\boxed{6} \\boxed{7}", False)
ex("hedging", "5", "Possible answers: \\boxed{5}, \\boxed{6}, \\boxed{7}, \\boxed{8}.", False)
ex("hedging", "12", "The answer is 12 or 13.", False)
ex("hedging", "12", "Final answer: $\\boxed{12}$ or maybe $\\boxed{21}$", False)
ex("hedging", "2", "The answer is either 2, 3, or 4.", False)
ex("hedging", "2", "\\boxed{2} \\boxed{2}", True, "the same answer twice is not a hedge")
ex("empty_answer", "9", "<think>\nThe product is 3 * 3 = 9.\n</think>\n<answer></answer>", False)
ex("empty_answer", "9", "We found 9 earlier in the reasoning: 3 * 3 = 9.\n<answer>  </answer>", False)
ex("empty_answer", "9", "3 * 3 = 9, so \\boxed{}", False)
ex("empty_answer", "9", "", False)
ex("empty_answer", "9", "<answer>\n\n</answer>", False)
# answer only in the reasoning
ex("reasoning_only", "42", "<think>\nWe need 6 * 7 which is 42. So the answer is 42.\n</think>", False)
ex("reasoning_only", "42", "<think>\n6 * 7 = 42, the answer is \\boxed{42}.\n</think>\nI could not finish the problem.", False)
ex("reasoning_only", "42", "<think>\n6 * 7 = 42.\n</think>\nThe answer is $\\boxed{41}$.", False)
ex("reasoning_only", "100", "Let me compute. First 25 * 4 = 100. Hmm, but we still need to account for the return trip, which doubles the distance. Let me reconsider the constraint on the speed and the time taken by the second car, which", False, "truncated response")
ex("reasoning_only", "16", "Step 1: 2^4 = 16.\nStep 2: we still need to subtract the overlap between the two sets, which requires", False, "truncated")
ex("reasoning_only", "6", "We try $n = 6$ first: it satisfies the first equation, $6 + 1 = 7$, but not the second, since $6 \\cdot 2 \\ne 11$. Trying other values, none works, and the system is inconsistent.\n\nTherefore, there is no solution.", False)
# answer tags with markers or boxes inside
ex("answer_tag", "11", "<think>\nPrime after 7 is 11.\n</think>\n<answer>The answer is 11</answer>", True)
ex("answer_tag", "11", "<think>\nPrime after 7 is 11.\n</think>\n<answer>\\boxed{11}</answer>", True)
ex("answer_tag", "11", "<think>\nPrime after 7 is 11.\n</think>\n<answer>13</answer>", False)
ex("answer_tag", "\\frac{2}{3}", "<answer>\n$\\frac{2}{3}$\n</answer>", True)
ex("answer_tag", "\\frac{2}{3}", "The probability is 2/3.\n<answer>2/3</answer>", True)
ex("answer_tag", "(1, 2)", "<answer> (1, 2) </answer>", True)
ex("answer_tag", "(1, 2)", "<answer>(2, 1)</answer>", False)
ex("answer_tag", "11", "<answer>11</answer> wait, actually let me recheck... <answer>12</answer>", False, "last tag wins")
# realistic long responses
LONG_R1 = ("<think>\nOkay, so I need to find the number of positive divisors of 360. Let me factor it first. 360 = 36 * 10 = 2^2 * 3^2 * 2 * 5 = 2^3 * 3^2 * 5. "
           "So the exponents are 3, 2, 1. The number of divisors is (3+1)(2+1)(1+1) = 4*3*2 = 24. Wait, let me double-check: 4 * 3 = 12, 12 * 2 = 24. Yes, 24. "
           "Hmm, but maybe the problem asks for proper divisors? Re-reading: 'how many positive divisors'. So all of them, 24.\n</think>\n\n"
           "To find the number of positive divisors of $360$, factor it:\n\\[\n360 = 2^3 \\cdot 3^2 \\cdot 5.\n\\]\n"
           "The number of divisors is $(3+1)(2+1)(1+1) = 24$.\n\n**Final Answer**\nThe number of positive divisors of 360 is \\boxed{%s}.")
ex("long_response", "24", LONG_R1 % "24", True)
ex("long_response", "24", LONG_R1 % "23", False)
LONG_LLAMA = ("## Step 1: Identify the formula\nThe sum of an arithmetic series is $S_n = \\frac{n}{2}(a_1 + a_n)$.\n\n"
              "## Step 2: Find the number of terms\nThe terms run from 3 to 99 with common difference 3, so $n = \\frac{99 - 3}{3} + 1 = 33$.\n\n"
              "## Step 3: Compute the sum\n$S_{33} = \\frac{33}{2}(3 + 99) = 33 \\cdot 51 = 1683$.\n\nThe final answer is: $\\boxed{%s}$")
ex("long_response", "1683", LONG_LLAMA % "1683", True)
ex("long_response", "1683", LONG_LLAMA % "1638", False)
LONG_QWEN = ("To solve the equation $x^2 - 5x + 6 = 0$, we factor the quadratic:\n\n\\[\nx^2 - 5x + 6 = (x - 2)(x - 3).\n\\]\n\n"
             "Setting each factor to zero gives $x = 2$ or $x = 3$.\n\nWe can verify: $2^2 - 10 + 6 = 0$ and $9 - 15 + 6 = 0$. Both roots check out.\n\n"
             "Thus, the solutions are $\\boxed{%s}$.")
ex("long_response", "2, 3", LONG_QWEN % "2, 3", True)
ex("long_response", "2, 3", LONG_QWEN % "2", False)
ex("long_response", "2, 3", LONG_QWEN % "x=2 \\text{ and } x=3", True)
ex("long_response", "2, 3", LONG_QWEN % "2, 3, 6", False)
LONG_MIN = ("Let the width be $w$. Then the length is $2w$ and the perimeter is $2(w + 2w) = 6w = 36$, so $w = 6$ and the length is $12$. "
            "The area is $6 \\cdot 12 = 72$.\nFinal Answer: The final answer is $%s$. I hope it is correct.")
ex("long_response", "72", LONG_MIN % "72", True)
ex("long_response", "72", LONG_MIN % "12", False)
LONG_R1B = ("<think>\nWe want $\\lim_{x\\to 0} \\frac{\\sin 3x}{x}$. Using $\\sin u \\approx u$, this is $3$. Alternatively by L'Hopital: $3\\cos 0 / 1 = 3$.\n</think>\n\n"
            "Using the standard limit $\\lim_{u \\to 0} \\frac{\\sin u}{u} = 1$ with $u = 3x$:\n\\[\n\\lim_{x\\to0}\\frac{\\sin 3x}{x} = 3\\lim_{u\\to0}\\frac{\\sin u}{u} = %s.\n\\]")
ex("long_response", "3", (LONG_R1B % "3") + "\n\nThe limit is $\\boxed{3}$.", True)
ex("long_response", "3", (LONG_R1B % "3") + "\n\nThe limit is $\\boxed{\\frac{1}{3}}$.", False)
# boxed answers later corrected by a marker
ex("correction", "5", "So we get $\\boxed{5}$. Wait, I made an error in step 2; redoing it:\nThe answer is 6.", False)
ex("correction", "6", "So we get $\\boxed{5}$. Wait, I made an error in step 2; redoing it:\nThe answer is 6.", True)
for i, (cat, g, o, e, note) in enumerate(X):
    out.append({"id": f"h{len(out):04d}", "gold": g, "output": o, "expected": e, "category": cat, "source": "handwritten", "note": note})

# second batch: different content and response styles
D = []
def add(cat, rows):
    for g, a, e in rows:
        D.append((cat, g, a, e))
add("integer_basic", [("1024", "2^{10}", True), ("1048576", "2^{20}", True), ("1048576", "1048575", False), ("18", "2 \\cdot 3^2", True),
    ("10", "\\binom{5}{2}", True), ("24", "4!", True), ("5", "\\log_2 32", True), ("6", "\\log_2 32", False), ("-1", "e^{i\\pi}", True), ("12", "12.", True)])
add("decimal_vs_fraction", [("0.01", "10^{-2}", True), ("\\frac{1}{3}", "0.\\overline{3}", True), ("\\frac{3}{5}", "0.6", True),
    ("\\frac{3}{5}", "0.65", False), ("\\frac{5}{8}", "0.625", True), ("\\frac{5}{8}", "0.6", False), ("0.45", "\\frac{9}{20}", True), ("0.45", "\\frac{4}{9}", False)])
add("fraction", [("-\\frac{3}{2}", "-\\dfrac{3}{2}", True), ("-\\frac{3}{2}", "-1.5", True), ("-\\frac{3}{2}", "-\\frac{2}{3}", False),
    ("\\frac{14}{3}", "\\frac{14}{3}", True), ("\\frac{14}{3}", "4\\frac{2}{3}", True), ("\\frac{14}{3}", "\\frac{14}{5}", False)])
add("symbolic_simplify", [("3x^2", "3x^{2}", True), ("x^2", "2x", False), ("t^2", "x^2", False), ("\\frac{1}{4}", "\\frac{1}{4}\\pi", False),
    ("4", "4x", False), ("\\tan x", "\\frac{\\sin x}{\\cos x}", True), ("\\sqrt{3}", "3^{1/2}", True), ("\\sqrt[3]{2}", "2^{1/3}", True),
    ("\\sqrt[3]{2}", "\\sqrt{2}", False), ("2x+1", "f(x) = 2x+1", True), ("\\frac{x-1}{2}", "f^{-1}(x) = \\frac{x-1}{2}", True),
    ("\\frac{x-1}{2}", "f^{-1}(x) = \\frac{x+1}{2}", False), ("x^2 - 2x + 1", "(1-x)^2", True), ("x^2 - 2x + 1", "(x+1)^2", False),
    ("\\frac{a+b}{ab}", "\\frac{1}{a} + \\frac{1}{b}", True), ("\\frac{a+b}{ab}", "\\frac{1}{a+b}", False)])
add("pi_sqrt", [("2\\pi", "2", False), ("\\frac{\\sqrt{6}}{3}", "\\sqrt{\\frac{2}{3}}", True), ("\\frac{\\sqrt{6}}{3}", "\\frac{\\sqrt{6}}{2}", False),
    ("6\\sqrt{2}", "\\sqrt{72}", True), ("6\\sqrt{2}", "\\sqrt{62}", False), ("\\frac{8\\pi}{3}", "\\frac{8}{3}\\pi", True), ("\\frac{8\\pi}{3}", "\\frac{3\\pi}{8}", False),
    ("1+\\sqrt{2}", "\\sqrt{2}+1", True), ("1+\\sqrt{2}", "\\sqrt{3}", False)])
add("set_list", [("\\emptyset", "\\varnothing", True), ("\\emptyset", "\\{\\}", True), ("\\emptyset", "0", False), ("\\{1, 2\\}", "\\left\\{ 1, 2 \\right\\}", True),
    ("-2, 2", "x = 2 \\text{ and } x = -2", True), ("-2, 2", "x = 2", False), ("1, 3, 5", "5, 3, 1", True), ("1, 3, 5", "1, 3, 5, 7", False),
    ("2", "2 \\text{ or } 3", False), ("\\frac{1}{2}, -1", "x=\\frac12, x=-1", True)])
add("interval_union", [("(-\\infty, 2) \\cup (2, \\infty)", "(-\\infty,2)\\cup(2,\\infty)", True), ("(-\\infty, 2) \\cup (2, \\infty)", "(-\\infty, \\infty)", False),
    ("[-1, 1]", "[-1,1)", False), ("[-1, 1]", "-1 \\le x \\le 1", True), ("(0, \\frac{1}{2}]", "(0, 0.5]", True), ("(0, \\frac{1}{2}]", "[0, 0.5]", False),
    ("[3, 7]", "[7, 3]", False), ("(-5, 0) \\cup (0, 5)", "(-5,5)", False)])
add("tuple_pair", [("(2, 3)", "(a, b) = (2, 3)", True), ("(2, 3)", "(a,b)=(3,2)", False), ("(0, 0, 1)", "(0,0,1)", True), ("(0, 0, 1)", "(0,1,0)", False),
    ("\\langle 1, 2 \\rangle", "\\langle 1,2\\rangle", True), ("\\langle 1, 2 \\rangle", "\\langle 2,1\\rangle", False), ("(-3, \\frac{1}{2})", "(-3, 0.5)", True)])
add("matrix_vector", [("\\begin{pmatrix} 0 & 1 \\\\ 1 & 0 \\end{pmatrix}", "\\begin{pmatrix}0&1\\\\1&0\\end{pmatrix}", True),
    ("\\begin{pmatrix} 0 & 1 \\\\ 1 & 0 \\end{pmatrix}", "\\begin{pmatrix}1&0\\\\0&1\\end{pmatrix}", False),
    ("\\begin{pmatrix} 4 \\\\ -2 \\\\ 1 \\end{pmatrix}", "\\begin{bmatrix} 4 \\\\ -2 \\\\ 1 \\end{bmatrix}", True),
    ("\\begin{pmatrix} 4 \\\\ -2 \\\\ 1 \\end{pmatrix}", "\\begin{bmatrix} 4 \\\\ 2 \\\\ 1 \\end{bmatrix}", False),
    ("\\begin{pmatrix} \\frac{3}{5} \\\\ \\frac{4}{5} \\end{pmatrix}", "\\begin{pmatrix} 0.6 \\\\ 0.8 \\end{pmatrix}", True),
    ("\\begin{pmatrix} 1 & 2 & 3 \\end{pmatrix}", "\\begin{pmatrix} 1 & 2 & 3 \\end{pmatrix}", True)])
add("equation", [("x = 3", "\\boxed{x=3}", True), ("y = x^2 - 4", "y = (x-2)(x+2)", True), ("y = x^2 - 4", "y = (x-2)^2", False),
    ("3x + 4y = 12", "y = -\\frac{3}{4}x + 3", True), ("3x + 4y = 12", "y = \\frac{3}{4}x + 3", False), ("z = 2", "z = 2", True), ("x = 3", "y = 3", False)])
add("inequality", [("x \\ge 2", "[2, \\infty)", True), ("x \\ge 2", "x ≥ 2", True), ("x \\ge 2", "x > 2", False), ("x < 5", "(-\\infty, 5)", True),
    ("x < 5", "(-\\infty, 5]", False), ("x \\neq 2", "x \\ne 2", True), ("0 < x \\le 3", "(0, 3]", True), ("0 < x \\le 3", "[0, 3]", False)])
add("percentage", [("35\\%", "35%", True), ("35\\%", "3.5\\%", False), ("7.5\\%", "7.5", True), ("150\\%", "150 \\%", True), ("150\\%", "50\\%", False)])
add("units_text", [("12", "12\\ \\text{cm}", True), ("12", "12~\\text{cm}", True), ("12 \\text{ m}", "12\\text{ cm}", False), ("\\$5.40", "5.4", True),
    ("\\$5.40", "5.04", False), ("1250", "\\$1,250", True), ("30 \\text{ mph}", "30 \\text{ miles per hour}", True), ("8 \\text{ inches}", "8 \\text{ feet}", False),
    ("40 \\text{ minutes}", "40", True), ("2 \\text{ liters}", "2 \\text{ mL}", False)])
add("degrees", [("45^\\circ", "45^{\\circ}", True), ("45^\\circ", "45", True), ("45^\\circ", "54^\\circ", False), ("120^\\circ", "120 \\text{ degrees}", True)])
add("plus_minus", [("\\pm\\frac{1}{2}", "\\frac12, -\\frac12", True), ("\\pm\\frac{1}{2}", "\\frac12", False), ("3 \\pm 2\\sqrt{2}", "3 \\pm 2\\sqrt{2}", True),
    ("3 \\pm 2\\sqrt{2}", "3 \\pm \\sqrt{2}", False), ("x = \\pm 5", "5, -5", True)])
add("complex", [("\\frac{3}{5} - \\frac{4}{5}i", "0.6 - 0.8i", True), ("\\frac{3}{5} - \\frac{4}{5}i", "0.6 + 0.8i", False), ("2i", "2i", True),
    ("-1 + 2i", "2i - 1", True), ("-1 + 2i", "1 - 2i", False)])
add("multiple_choice", [("C", "\\text{(C)}\\ 12", True), ("C", "(C) 12", True), ("C", "\\textbf{(C) } 12", True), ("C", "(D) 14", False), ("A", "\\mathrm{(A)}", True)])
add("text_answer", [("\\text{no solution}", "\\text{no solution}", True), ("\\text{no solution}", "0", False), ("\\text{odd}", "\\text{even}", False),
    ("\\text{True}", "\\text{true}", True), ("\\text{True}", "\\text{False}", False)])
add("thousands_sep", [("1250.75", "1,250.75", True), ("2000000", "2{,}000{,}000", True), ("2000000", "200,000", False), ("10000", "10 000", True)])
add("scientific", [("1.5 \\times 10^{-4}", "0.00015", True), ("1.5 \\times 10^{-4}", "0.0015", False), ("4 \\times 10^{3}", "4000", True), ("4000", "4\\times10^{3}", True)])
add("mixed_number", [("-2\\frac{1}{2}", "-\\frac{5}{2}", True), ("-2\\frac{1}{2}", "-\\frac{3}{2}", False), ("5\\frac{1}{4}", "5.25", True), ("5\\frac{1}{4}", "5.14", False)])
add("unicode_math", [("\\sqrt{3}/2", "√3/2", True), ("x \\ge 2", "x ≥ 2", True), ("x \\ne 1", "x ≠ 1", True), ("\\frac{1}{4}", "¼", True), ("\\frac{1}{4}", "½", False)])
add("latex_delimiters", [("\\frac{2}{3}", "\\left(\\frac{2}{3}\\right)", True), ("5", "{5}", True), ("\\frac{1}{2}", "\\tfrac12", True), ("6", "\\;6\\;", True)])

def fmt2(i, ans):
    style = i % 6
    r = "We start from the given conditions. A quick estimate suggests about $19$, which is only a rough bound. Carrying the computation through exactly:"
    if style == 0:
        return f"{r}\n\n### Final Answer\n$$\\boxed{{{ans}}}$$"
    if style == 1:
        return f"{r}\n\n**Answer:** $\\boxed{{{ans}}}$"
    if style == 2:
        return f"<think>\nLet me double check the arithmetic. Hmm, $19$ is wrong. OK.\n</think>\nAfter simplifying, we find the final result.\n\nThus the answer is \\boxed{{{ans}}}. This completes the solution."
    if style == 3:
        return f"{r}\n\\[\n\\boxed{{{ans}}}\n\\]"
    if style == 4:
        return f"{r}\n\nTherefore, the final answer is: $\\boxed{{{ans}}}$. I hope it is correct."
    return f"<think>\n{r}\n</think>\n\n<answer>\n\\boxed{{{ans}}}\n</answer>"

E = []
def ex(cat, gold, output, expected, note=""):
    E.append((cat, gold, output, expected, note))
ex("answer_is", "12", "Adding everything up gives 12.\n\n**Final Answer:** 12", True)
ex("answer_is", "12", "Adding everything up gives 12.\n\nANSWER: 12", True)
ex("answer_is", "12", "Adding everything up gives 12.\n\nTherefore, the answer is **12**.", True)
ex("answer_is", "12", "Adding everything up gives 13, minus the one counted twice.\n\nTherefore, the answer is **11**.", False)
ex("answer_is", "\\frac{1}{4}", "Each of the 4 outcomes is equally likely, so the answer is 1/4.", True)
ex("answer_is", "\\frac{1}{4}", "Each of the 4 outcomes is equally likely, so the answer is 4.", False)
ex("boxed_in_sentence", "12", "Thus $n = \\boxed{12}$.", True)
ex("boxed_in_sentence", "12", "Thus $n = \\boxed{12}$, and $n + 1 = 13$ is the next value.", True)
ex("boxed_in_sentence", "13", "Thus $n = \\boxed{12}$, and $n + 1 = 13$ is the next value.", False)
ex("hedging", "2", "\\boxed{2 \\text{ or } 3}", False)
ex("hedging", "4", "The answer is $\\boxed{4}$ (or possibly $\\boxed{5}$ if we count the endpoint).", False)
ex("hedging", "4", "Answer: 4, 5, 6, 7, 8", False)
ex("hedging", "4", "\\boxed{4}\\boxed{5}\\boxed{6}\\boxed{7}\\boxed{8}\\boxed{9}\\boxed{10}\\boxed{11}\\boxed{12}", False)
ex("empty_answer", "4", "<think>\n2 + 2 = 4\n</think>\n<answer>\n</answer>\nThe answer is 4.", False, "empty tag wins over later text? conservative: the tag is the answer")
ex("reasoning_only", "4", "<think>\n2 + 2 = 4, so the answer is \\boxed{4}.", False, "unterminated think: everything is reasoning")
ex("reasoning_only", "64", "<think>\nThe cube of 4 is 64. Final answer: 64\n</think>\n\nI'm sorry, I ran out of time.", False)
ex("long_response", "\\frac{5}{12}", "<think>\nTwo dice: count pairs with sum greater than 7. Sums 8: 5 ways, 9: 4, 10: 3, 11: 2, 12: 1, total 15. 15/36 = 5/12.\n</think>\n\nThere are $36$ equally likely outcomes. The number of outcomes with a sum greater than $7$ is $5+4+3+2+1 = 15$, so the probability is $\\frac{15}{36} = \\boxed{\\dfrac{5}{12}}$.", True)
ex("long_response", "\\frac{5}{12}", "<think>\nTwo dice: count pairs with sum at least 7. Sums 7: 6 ways, 8: 5, ... total 21. 21/36 = 7/12.\n</think>\n\nThere are $36$ equally likely outcomes. The number of outcomes with a sum of at least $7$ is $21$, so the probability is $\\frac{21}{36} = \\boxed{\\dfrac{7}{12}}$.", False)
ex("long_response", "14", "Let the two numbers be $a$ and $b$ with $a+b=20$ and $a-b=8$. Adding, $2a = 28$, so $a = 14$ and $b = 6$.\n\nThe larger number is $\\boxed{14}$.", True)
ex("long_response", "6", "Let the two numbers be $a$ and $b$ with $a+b=20$ and $a-b=8$. Adding, $2a = 28$, so $a = 14$ and $b = 6$.\n\nThe larger number is $\\boxed{14}$.", False)

rows = []
for i, (cat, g, a, e) in enumerate(D):
    rows.append((cat, g, fmt2(i, a), e, f"answer: {a}"))
rows.extend(E)
for cat, g, o, e, note in rows:
    out.append({"id": f"h{len(out):04d}", "gold": g, "output": o, "expected": e, "category": cat, "source": "handwritten", "note": note})
F = []
def add(cat, rows):
    for g, a, e in rows:
        F.append((cat, g, a, e))
add("integer_basic", [("4", "\\sqrt{16}", True), ("9", "3^2", True), ("3", "3^2", False), ("0", "-0", True), ("1000", "10^3", True), ("2", "2.0", True), ("5", "5x", False), ("12", "12 \\pm 1", False)])
add("decimal_vs_fraction", [("\\frac{1}{6}", "0.1667", True), ("1.5", "1.50", True), ("1.5", "1.05", False), ("1.5", "15/10", True), ("-0.5", "-1/2", True), ("-0.5", "1/2", False), ("0.75", "\\frac{3}{4}", True), ("0.75", "\\frac{3}{5}", False)])
add("symbolic_simplify", [("\\frac{x}{x+1}", "1 - \\frac{1}{x+1}", True), ("\\frac{x}{x+1}", "\\frac{1}{x+1}", False), ("\\sin^2 x", "1 - \\cos^2 x", True), ("\\sin^2 x", "\\cos^2 x", False),
    ("2^{x+1}", "2 \\cdot 2^x", True), ("2^{x+1}", "2^x + 1", False), ("ab", "ba", True), ("\\sqrt{x^2+1}", "(x^2+1)^{1/2}", True), ("e^{-x}", "\\frac{1}{e^x}", True),
    ("-x^2", "(-x)^2", False), ("x^2 y", "x^{2}y", True), ("\\frac{x^2-1}{x-1}", "x+1", True), ("\\frac{x^2-1}{x-1}", "x-1", False)])
add("pi_sqrt", [("\\pi^2", "π²", True), ("5\\sqrt{2}", "5√2", True), ("5\\sqrt{2}", "2√5", False), ("2^{-1}", "\\frac12", True), ("\\frac{\\sqrt{2}}{4}", "\\frac{1}{2\\sqrt{2}}", True), ("\\frac{\\sqrt{2}}{4}", "\\frac{1}{\\sqrt{2}}", False)])
add("interval_union", [("(-2, 3]", "-2 < x \\leq 3", True), ("(-2, 3]", "-2 \\le x < 3", False), ("(1, \\infty)", "x > 1", True), ("(1, \\infty)", "x \\ge 1", False),
    ("[0, 2\\pi)", "[0, 2\\pi)", True), ("[0, 2\\pi)", "[0, 2\\pi]", False), ("(-\\infty, -2] \\cup [2, \\infty)", "(-\\infty,-2]\\cup[2,+\\infty)", True),
    ("(-\\infty, -2] \\cup [2, \\infty)", "[-2, 2]", False), ("(1, 2)", "(1, 2]", False)])
add("tuple_pair", [("(1, 2)", "x=1, y=2", True), ("(1, 2)", "x=2, y=1", False), ("(3, -1)", "\\left( 3, -1 \\right)", True), ("(3, -1)", "(-1, 3)", False), ("(1, 2)", "\\{1, 2\\}", False)])
add("equation", [("y = 3x - 2", "3x - y = 2", True), ("y = 3x - 2", "y - 3x + 2 = 0", True), ("y = 3x - 2", "y = 3x + 2", False), ("x^2 + y^2 = 4", "x^2 + y^2 - 4 = 0", True),
    ("(x-1)^2 + (y+2)^2 = 9", "(x-1)^2 + (y-2)^2 = 9", False), ("(x-1)^2 + (y+2)^2 = 9", "(x - 1)^2 + (y + 2)^2 = 9", True), ("x = 3", "x = 3, y = 4", False)])
add("text_answer", [("\\text{Monday}", "\\textbf{Monday}", True), ("\\text{infinitely many}", "infinitely many", True), ("\\text{infinitely many}", "\\text{none}", False), ("\\text{right}", "\\text{acute}", False)])
add("multiple_choice", [("(B)", "B", True), ("\\text{(B)}", "(B) 6", True), ("\\text{(B)}", "(C) 8", False), ("E", "\\textbf{(E)}", True), ("E", "\\textbf{(A)}", False)])
add("units_text", [("60 \\text{ seconds}", "60 \\text{ s}", True), ("\\$12.50", "12.5", True), ("\\$12.50", "\\$12.05", False), ("250", "250 \\text{ cm}", True), ("3 \\text{ km}", "3 \\text{ cm}", False)])
add("degrees", [("60", "60°", True), ("60", "50°", False), ("15^\\circ", "15^{\\circ}", True)])
add("plus_minus", [("\\pm\\sqrt{2}", "\\sqrt{2}, -\\sqrt{2}", True), ("\\pm\\sqrt{2}", "\\sqrt{2}", False), ("\\pm\\sqrt{2}", "x = \\pm\\sqrt{2}", True), ("\\pm\\sqrt{2}", "\\pm 2", False)])
add("complex", [("\\sqrt{2} i", "i\\sqrt{2}", True), ("-1", "i^2", True), ("2 + i", "(2 + i)", True), ("2 + i", "2 - i", False), ("\\frac{1}{2} - \\frac{\\sqrt{3}}{2} i", "\\frac{1 - i\\sqrt{3}}{2}", True)])
add("scientific", [("6.02 \\times 10^{23}", "6.02 \\cdot 10^{23}", True), ("6.02 \\times 10^{23}", "6.2 \\times 10^{23}", False), ("3 \\times 10^{8}", "3.0 \\times 10^8", True), ("3 \\times 10^{8}", "3 \\times 10^{-8}", False)])
add("unicode_math", [("x^3", "x³", True), ("\\emptyset", "∅", True), ("\\frac{3}{2}", "1½", True), ("\\frac{3}{2}", "1¼", False)])
add("mixed_number", [("\\frac{3}{2}", "1\\tfrac12", True), ("1\\frac{1}{2}", "1\\frac{1}{2}", True), ("1\\frac{1}{2}", "\\frac{1}{2}", False)])
add("thousands_sep", [("1000", "1,000.00", True), ("1000", "1.000", False), ("25000", "25,000", True), ("25000", "2,500", False)])
add("matrix_vector", [("\\begin{pmatrix} 2 & 0 \\\\ 0 & 2 \\end{pmatrix}", "\\begin{pmatrix} 2 & 0 \\\\ 0 & 2 \\end{pmatrix}", True),
    ("\\begin{pmatrix} 2 & 0 \\\\ 0 & 2 \\end{pmatrix}", "\\begin{pmatrix} 2 & 0 & 0 & 2 \\end{pmatrix}", False),
    ("\\begin{pmatrix} 1 \\\\ -1 \\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ -1 \\end{pmatrix}", True), ("\\begin{pmatrix} 1 \\\\ -1 \\end{pmatrix}", "\\begin{pmatrix} -1 \\\\ 1 \\end{pmatrix}", False)])

def fmt3(i, ans):
    style = i % 5
    if style == 0:
        return f"Let's solve this step by step.\n1. Write down the condition.\n2. Simplify; an early guess of 19 turns out wrong.\n3. Conclude.\n\nFinal answer: ${ans}$"
    if style == 1:
        return f"<think>\nI'll check the case analysis twice; 19 was a miscount.\n</think>\n\nAfter checking both cases, the result is $\\boxed{{{ans}}}$."
    if style == 2:
        return f"We simplify carefully (the first attempt gave 19, an arithmetic slip).\n\nThe final answer is $\\boxed{{{ans}}}$."
    if style == 3:
        return f"Solution. The computation is routine.\n\n\\fbox{{${ans}$}}"
    return f"<answer>{ans}</answer>"

G = []
def ex(cat, gold, output, expected, note=""):
    G.append((cat, gold, output, expected, note))
ex("answer_is", "5", "Two plus three. The answer is 5 because 2 + 3 = 5.", True)
ex("answer_is", "12", "Each box has 4 apples. So the answer is 12 apples, since each of the 3 boxes has 4.", True)
ex("answer_is", "3", "Each box has 4 apples. So the answer is 12 apples, since each of the 3 boxes has 4.", False)
ex("answer_is", "12", "We multiply. The answer is 12, which is 3 times 4.", True)
ex("answer_is", "4", "We multiply. The answer is 12, which is 3 times 4.", False)
ex("answer_is", "7", "Adding the two groups.\nAnswer: 7 (since 3 + 4 = 7)", True)
ex("answer_is", "45", "Each shirt costs 15 dollars. Therefore the total is 45 dollars for 3 shirts.", True)
ex("answer_is", "3", "Each shirt costs 15 dollars. Therefore the total is 45 dollars for 3 shirts.", False)
ex("multiple_choice", "B", "Comparing the options, only the second one satisfies both conditions. The correct option is (B).", True)
ex("multiple_choice", "B", "Comparing the options, only the third one satisfies both conditions. The correct option is (C).", False)
ex("gsm8k", "18", "9 eggs at $2 each is $18.\n#### $18.00", True)
ex("gsm8k", "18", "9 eggs at $2 each is $18.\n#### 18.5", False)
ex("gsm8k", "1000", "The answer: 1000\n#### 1,000", True)
ex("answer_tag", "5", "<answer>We compute 2 + 3 = 5. So the answer is 5.</answer>", True)
ex("answer_tag", "5", "<answer>We compute 2 + 3 = 5, plus the extra one. So the answer is 6.</answer>", False)
ex("answer_tag", "\\frac{1}{2}", "<answer>Answer: $\\frac12$</answer>", True)
ex("boxed_in_sentence", "5", "So the answer is $\\boxed{5}$.\n\nVerification: $2 + 3 = 5$ and $5 \\cdot 1 = 5$, consistent.", True)
ex("boxed_in_sentence", "5", "\\boxed{5}\n\nSo there are 5 cookies left over after sharing 20 among 3 friends.", True)
ex("hedging", "5", "It might be \\boxed{5}, but it could also be \\boxed{6}; I am not certain.", False)
ex("hedging", "1", "\\boxed{1}\\quad\\boxed{-1}", False)
ex("reasoning_only", "10", "<think>\nThe sum 1+2+3+4 = 10.\n</think>\n\nThe problem is ambiguous, so I cannot give a single answer.", False)
ex("reasoning_only", "10", "<think>\nThe sum 1+2+3+4 = 10.\n</think>\n\n<answer></answer>", False)
ex("empty_answer", "10", "The sum is \\boxed{ }.", False)

rows3 = []
for i, (cat, g, a, e) in enumerate(F):
    rows3.append((cat, g, fmt3(i, a), e, f"answer: {a}"))
rows3.extend(G)
for cat, g, o, e, note in rows3:
    out.append({"id": f"h{len(out):04d}", "gold": g, "output": o, "expected": e, "category": cat, "source": "handwritten", "note": note})
H = [
 ("answer_is", "5", "The answer is $5$!", True), ("answer_is", "10", "Thus, there are 10 ways.", True), ("answer_is", "10", "Thus, there are 12 ways.", False),
 ("symbolic_simplify", "3", "\\boxed{3^2}", False), ("hedging", "2", "\\boxed{x = 2 \\text{ or } x = 3}", False),
 ("symbolic_simplify", "\\frac{1}{2}", "\\boxed{\\frac{1}{2} + C}", False), ("symbolic_simplify", "x^2 + C", "\\boxed{x^2}", False),
 ("symbolic_simplify", "\\frac{x^3}{3} + C", "\\boxed{\\frac{1}{3}x^3 + C}", True), ("close_number", "100", "\\boxed{100.5}", False),
 ("decimal_vs_fraction", "0.3", "\\boxed{\\frac{1}{3}}", False), ("close_number", "33", "\\boxed{33.3}", False), ("decimal_vs_fraction", "\\frac{1}{3}", "\\boxed{0.333333}", True),
 ("close_number", "1", "\\boxed{0.999}", False), ("close_number", "1", "\\boxed{0.9999}", False), ("close_number", "1", "\\boxed{1.0001}", False),
 ("close_number", "1000", "\\boxed{999.9}", False), ("close_number", "0.001", "\\boxed{0}", False), ("close_number", "0", "\\boxed{0.001}", False), ("close_number", "2", "\\boxed{2.004}", False),
 ("percentage", "0.12", "\\boxed{12}", False), ("units_text", "5 \\text{ cm}", "\\boxed{5 \\text{ mm}}", False), ("hedging", "5", "\\boxed{5 \\text{ or } 6}", False),
 ("pi_sqrt", "\\sqrt{2}", "\\boxed{2}", False), ("tuple_pair", "(1,2)", "\\boxed{(1,2,3)}", False), ("set_list", "\\{1,2\\}", "\\boxed{\\{1,2,2\\}}", True),
 ("wrong_sign", "2", "\\boxed{-2}", False), ("wrong_sign", "-2", "\\boxed{- 2}", True), ("complex", "2+i", "\\boxed{2+j}", False),
 ("multiple_choice", "A", "\\boxed{\\text{A or B}}", False), ("multiple_choice", "C", "The answer is (C) or (D).", False), ("multiple_choice", "C", "\\boxed{C, D}", False),
 ("text_answer", "\\text{yes}", "\\boxed{\\text{yes and no}}", False), ("plus_minus", "4", "\\boxed{\\pm 4}", False), ("plus_minus", "\\pm 4", "\\boxed{4}", False),
 ("symbolic_simplify", "x+1", "\\boxed{y+1}", False), ("symbolic_simplify", "2x", "\\boxed{2 \\cdot x}", True), ("tuple_pair", "3:4", "\\boxed{4:3}", False),
 ("interval_union", "(-\\infty,0)", "\\boxed{(-\\infty,0]}", False), ("integer_basic", "120", "\\boxed{5 \\cdot 4 \\cdot 3 \\cdot 2}", True), ("integer_basic", "120", "\\boxed{5 \\cdot 4 \\cdot 3}", False),
 ("units_text", "12", "\\boxed{12 \\text{ cm and } 13 \\text{ cm}}", False), ("correction", "2", "\\boxed{2}\n\nWait, that's wrong. Let me redo: the answer is 3.", False),
 ("answer_is", "3", "The answer is 3, not 4.", True), ("answer_is", "4", "The answer is 3, not 4.", False), ("hedging", "2", "The answer is x = 2 or x = -2.", False),
 ("plus_minus", "\\pm 2", "The answer is x = 2 or x = -2.", True), ("units_text", "60", "\\boxed{60} minutes, i.e. 1 hour", True),
 ("minerva", "15", "In total 15 students.\n\nFinal Answer: The final answer is 15. I hope it is correct.", True), ("hedging", "2", "The final answer is $\\boxed{2}$ and $\\boxed{3}$", False),
 ("long_response", "12", "**Final Answer**\n\n\\boxed{12}\n\n**Explanation**: We counted 3 groups of 4.", True),
 ("answer_is", "5", "**Answer: 5**", True), ("answer_is", "5", "**Answer: 6**", False), ("answer_is", "5", "Answer: $5$ (rounded to the nearest whole number)", True),
 ("answer_is", "5", "The answer is \\(5\\).", True), ("answer_is", "5", "The answer is \\(6\\).", False), ("answer_is", "5", "So, the answer is **5** apples.", True),
 ("answer_is", "2", "Final Answer: 2\n\nExplanation: 1 + 1 = 2, and 2 + 0 = 2.", True), ("answer_is", "2", "Final Answer: 3\n\nExplanation: 1 + 1 = 2, and 2 + 0 = 2.", False),
 ("tuple_pair", "(2,3)", "The answer is $(3,2)$.", False), ("interval_union", "[2,3]", "The answer is $(2,3)$.", False), ("set_list", "\\{2,3\\}", "The answer is $x = 2$ and $x = 3$.", True),
 ("set_list", "\\{2,3\\}", "The answer is $x = 2$.", False), ("answer_is", "5", "Final answer: the number of ways is 5.", True), ("answer_is", "5", "Final answer: the number of ways is 6.", False),
 ("answer_tag", "9", "<answer>The value is 9.</answer>", True), ("answer_tag", "9", "<answer>x = 9</answer>", True), ("answer_tag", "9", "<answer>9 cm</answer>", True),
 ("answer_tag", "9", "<answer>between 8 and 10</answer>", False), ("answer_tag", "9", "<answer>about 9.2</answer>", False),
 ("answer_is", "7", "The answer is 7. The answer is 8.", False),
 ("answer_is", "4", "We checked every case. The answer is not 4.", False), ("answer_is", "5", "We checked every case. The answer is not 4, it is 5.", True),
 ("answer_is", "4", "We checked every case. The answer is not 4, it is 5.", False), ("answer_is", "8", "The answer is 7. The answer is 8.", True),
]
rows4 = [(c, g, o, e, "") for c, g, o, e in H]
for cat, g, o, e, note in rows4:
    out.append({"id": f"h{len(out):04d}", "gold": g, "output": o, "expected": e, "category": cat, "source": "handwritten", "note": note})
rows5 = [('latex_delimiters', '$12$', '\\boxed{12}', True, 'gold written differently'), ('latex_delimiters', '$\\frac{1}{2}$', 'We work it out below.\n\n\\boxed{0.5}', True, 'gold written differently'), ('symbolic_simplify', '\\boxed{7}', '\\boxed{7}', True, 'gold written differently'), ('symbolic_simplify', '\\boxed{7}', 'We work it out below.\n\n\\boxed{8}', False, 'gold written differently'), ('multiple_choice', '\\text{(A)}', '\\boxed{A}', True, 'gold written differently'), ('multiple_choice', '\\text{(A)}', 'We work it out below.\n\n\\boxed{B}', False, 'gold written differently'), ('multiple_choice', '(A)', '\\boxed{\\text{(A)}}', True, 'gold written differently'), ('units_text', '\\$12', 'We work it out below.\n\n\\boxed{12}', True, 'gold written differently'), ('units_text', '\\$12', '\\boxed{\\$13}', False, 'gold written differently'), ('interval_union', 'x \\in [2,5)', 'We work it out below.\n\n\\boxed{[2,5)}', True, 'gold written differently'), ('interval_union', 'x \\in [2,5)', '\\boxed{[2,5]}', False, 'gold written differently'), ('set_list', '\\left\\{1,2\\right\\}', 'We work it out below.\n\n\\boxed{2, 1}', True, 'gold written differently'), ('fraction', '\\tfrac{3}{7}', '\\boxed{3/7}', True, 'gold written differently'), ('plus_minus', 'x=\\frac{-1\\pm\\sqrt{5}}{2}', 'We work it out below.\n\n\\boxed{\\frac{-1+\\sqrt5}{2}, \\frac{-1-\\sqrt5}{2}}', True, 'gold written differently'), ('plus_minus', 'x=\\frac{-1\\pm\\sqrt{5}}{2}', '\\boxed{\\frac{-1+\\sqrt5}{2}}', False, 'gold written differently'), ('plus_minus', '\\frac{-1\\pm\\sqrt{5}}{2}', 'We work it out below.\n\n\\boxed{\\frac{-1 \\pm \\sqrt{5}}{2}}', True, 'gold written differently'), ('plus_minus', '\\frac{-b \\pm \\sqrt{b^2-4ac}}{2a}', '\\boxed{\\frac{-b \\pm \\sqrt{b^2-4ac}}{2a}}', True, 'gold written differently'), ('fraction', '\\frac{1}{2}', 'We work it out below.\n\n\\boxed{\\frac{2}{4}}', True, 'gold written differently'), ('integer_basic', '5', '\\boxed{\\frac{10}{2}}', True, 'gold written differently'), ('integer_basic', '5', 'We work it out below.\n\n\\boxed{\\frac{10}{3}}', False, 'gold written differently'), ('equation', 'f(x) = x^2', '\\boxed{x^2}', True, 'gold written differently'), ('equation', 'f(x) = x^2', 'We work it out below.\n\n\\boxed{f(x) = x^3}', False, 'gold written differently'), ('equation', 'y=2', '\\boxed{2}', True, 'gold written differently'), ('equation', 'y = 2', 'We work it out below.\n\n\\boxed{x = 2}', False, 'gold written differently'), ('symbolic_simplify', '(x-2)(x+3)', '\\boxed{(x+3)(x-2)}', True, 'gold written differently'), ('symbolic_simplify', '(x-2)(x+3)', 'We work it out below.\n\n\\boxed{x^2+x-6}', True, 'gold written differently'), ('symbolic_simplify', '(x-2)(x+3)', '\\boxed{(x-3)(x+2)}', False, 'gold written differently'), ('symbolic_simplify', '\\frac{1}{2}\\ln|x| + C', 'We work it out below.\n\n\\boxed{\\frac{\\ln|x|}{2} + C}', True, 'gold written differently'), ('integer_basic', '0', '\\boxed{\\text{none}}', False, 'gold written differently'), ('symbolic_simplify', '\\text{none}', 'We work it out below.\n\n\\boxed{0}', False, 'gold written differently'), ('set_list', '1, 2, 3, 4', '\\boxed{1,2,3,4}', True, 'gold written differently'), ('set_list', '1, 2, 3, 4', 'We work it out below.\n\n\\boxed{1,2,3}', False, 'gold written differently'), ('set_list', '\\{(1,2),(3,4)\\}', '\\boxed{(3,4),(1,2)}', True, 'gold written differently'), ('set_list', '\\{(1,2),(3,4)\\}', 'We work it out below.\n\n\\boxed{(1,2),(4,3)}', False, 'gold written differently'), ('interval_union', '-\\infty', '\\boxed{-\\infty}', True, 'gold written differently'), ('interval_union', '(-\\infty, \\infty)', 'We work it out below.\n\n\\boxed{\\text{all real numbers}}', True, 'gold written differently'), ('units_text', '5\\text{ units}^2', '\\boxed{5}', True, 'gold written differently'), ('units_text', '\\frac{5}{2}\\text{ cm}', 'We work it out below.\n\n\\boxed{2.5\\text{ cm}}', True, 'gold written differently'), ('units_text', '\\frac{5}{2}\\text{ cm}', '\\boxed{2.5\\text{ m}}', False, 'gold written differently'), ('integer_basic', '3.5', 'We work it out below.\n\n\\boxed{\\frac{7}{2}}', True, 'gold written differently'), ('integer_basic', '3.5', '\\boxed{3\\frac{1}{2}}', True, 'gold written differently'), ('integer_basic', '3.50', 'We work it out below.\n\n\\boxed{3.5}', True, 'gold written differently'), ('integer_basic', '10^{10}', '\\boxed{10000000000}', True, 'gold written differently'), ('integer_basic', '10^{10}', 'We work it out below.\n\n\\boxed{1000000000}', False, 'gold written differently'), ('pi_sqrt', '\\frac{\\sqrt{3}}{2}', '\\boxed{\\frac{\\sqrt3}2}', True, 'gold written differently'), ('pi_sqrt', '\\frac{\\sqrt{3}}{2}', 'We work it out below.\n\n\\boxed{\\sqrt{\\frac{3}{4}}}', True, 'gold written differently'), ('pi_sqrt', '\\dfrac{\\pi}{4}', '\\boxed{\\frac\\pi4}', True, 'gold written differently'), ('fraction', '\\frac12', 'We work it out below.\n\n\\boxed{\\frac{1}{2}}', True, 'gold written differently'), ('pi_sqrt', '\\sqrt2', '\\boxed{\\sqrt{2}}', True, 'gold written differently'), ('pi_sqrt', '\\frac{1}{\\sqrt{2}}', 'We work it out below.\n\n\\boxed{\\frac{\\sqrt{2}}{2}}', True, 'gold written differently'), ('pi_sqrt', '\\frac{1}{\\sqrt{2}}', '\\boxed{\\sqrt{2}}', False, 'gold written differently'), ('symbolic_simplify', 'e', 'We work it out below.\n\n\\boxed{e}', True, 'gold written differently'), ('symbolic_simplify', 'e^2', 'We work it out below.\n\n\\boxed{e^{2}}', True, 'gold written differently'), ('symbolic_simplify', 'e^2', '\\boxed{2e}', False, 'gold written differently'), ('integer_basic', '1', 'We work it out below.\n\n\\boxed{\\sin^2\\theta+\\cos^2\\theta}', True, 'gold written differently'), ('symbolic_simplify', '\\cos 2x', '\\boxed{\\cos^2 x - \\sin^2 x}', True, 'gold written differently'), ('symbolic_simplify', '\\cos 2x', 'We work it out below.\n\n\\boxed{2\\cos x}', False, 'gold written differently'), ('integer_basic', 'i', '\\boxed{\\sqrt{-1}}', True, 'gold written differently'), ('integer_basic', '2i', 'We work it out below.\n\n\\boxed{\\sqrt{-4}}', True, 'gold written differently'), ('symbolic_simplify', '\\log_3 9', '\\boxed{2}', True, 'gold written differently')]
for cat, g, o, e, note in rows5:
    out.append({"id": f"h{len(out):04d}", "gold": g, "output": o, "expected": e, "category": cat, "source": "handwritten", "note": note})
rows6 = [('plain_text_math', '3\\sqrt{2}', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{3*sqrt(2)}', True, ''), ('plain_text_math', '3\\sqrt{2}', 'The answer is 3*sqrt(2).', True, ''), ('plain_text_math', '3\\sqrt{2}', 'The answer is 2*sqrt(3).', False, ''), ('plain_text_math', '\\frac{\\pi}{2}', 'We simplify step by step; 19 was an early slip.\n\nThe answer is pi/2.', True, ''), ('plain_text_math', '2\\pi', 'Final answer: 2*pi', True, ''), ('plain_text_math', '2\\pi', 'Final answer: 2pi', True, ''), ('plain_text_math', '(x+1)^2', 'We simplify step by step; 19 was an early slip.\n\nFinal answer: x^2 + 2*x + 1', True, ''), ('plain_text_math', '(x+1)^2', 'Final answer: x^2 + 2*x + 2', False, ''), ('plain_text_math', '\\frac{\\sqrt{3}}{2}', 'Final answer: sqrt(3)/2', True, ''), ('plain_text_math', '0.001', 'We simplify step by step; 19 was an early slip.\n\nFinal answer: 1e-3', True, ''), ('plain_text_math', '0.001', 'Final answer: 1e-2', False, ''), ('latex_delimiters', '\\frac{7}{2}', '\\boxed{\\frac{7}{2} = 3.5}', True, ''), ('latex_delimiters', '5', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{\\mathbf{5}}', True, ''), ('latex_delimiters', '5', '\\boxed{\\bm{5}}', True, ''), ('latex_delimiters', '5', '$x=\\boxed{5}$', True, ''), ('latex_delimiters', '3', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{\\lfloor 3.5 \\rfloor}', True, ''), ('latex_delimiters', '6', '\\boxed{2 \\times 3}', True, ''), ('answer_is', '\\frac{3}{4}', 'You need 3/4 of a cup. The answer is 3/4 cup.', True, ''), ('latex_delimiters', '12', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{12}\\text{.}', True, ''), ('latex_delimiters', '5', '\\boxed{=5}', True, ''), ('latex_delimiters', '\\frac{1}{2}', '\\boxed{\\frac{1}{2}\\text{.}}', True, ''), ('symbolic_simplify', 'x^2+2x+1', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{x^2+2x+1}', True, ''), ('symbolic_simplify', 'a+b', '\\boxed{b+a}', True, ''), ('symbolic_simplify', '\\frac{1}{x}', '\\boxed{1/x}', True, ''), ('symbolic_simplify', '\\frac{1}{x}', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{x^{-1}}', True, ''), ('symbolic_simplify', '\\frac{1}{x}', '\\boxed{-1/x}', False, ''), ('answer_is', '2', 'The answer is: \\boxed{2}', True, ''), ('latex_delimiters', '2', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{\\text{2}}', True, ''), ('latex_delimiters', '2', '\\boxed{\\textbf{2}}', True, ''), ('scientific', '1.2 \\times 10^{-3}', '\\boxed{1.2 \\times 10^{-3}}', True, ''), ('scientific', '1.2 \\times 10^{-3}', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{0.0012}', True, ''), ('plain_text_math', '1.2 \\times 10^{-3}', '\\boxed{1.2e-3}', True, ''), ('scientific', '2000', '\\boxed{2\\times10^3}', True, ''), ('scientific', '2000', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{2 \\cdot 10^{3}}', True, ''), ('answer_is', '15', 'The answer is 15 (fifteen).', True, ''), ('latex_delimiters', '-\\frac{1}{2}', '\\boxed{-1/2}', True, ''), ('latex_delimiters', '-\\frac{1}{2}', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{\\frac{-1}{2}}', True, ''), ('latex_delimiters', '-\\frac{1}{2}', '\\boxed{-\\frac{-1}{2}}', False, ''), ('latex_delimiters', '\\sqrt{2}/2', '\\boxed{\\frac{1}{\\sqrt2}}', True, ''), ('latex_delimiters', '\\frac{2}{\\sqrt{3}}', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{\\frac{2\\sqrt3}{3}}', True, ''), ('latex_delimiters', '90', '\\boxed{90^\\circ}', True, ''), ('degrees', '90^\\circ', '\\boxed{90\\text{°}}', True, ''), ('interval_union', 'x \\in (-2, 2)', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{-2<x<2}', True, ''), ('interval_union', 'x \\in (-2, 2)', '\\boxed{|x|<2}', True, ''), ('interval_union', 'x \\in (-2, 2)', '\\boxed{|x|\\le 2}', False, ''), ('set_list', '\\{3\\}', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{x=3}', True, ''), ('latex_delimiters', '3', '\\boxed{\\{3\\}}', True, ''), ('set_list', '4, -4', '\\boxed{\\pm4}', True, ''), ('set_list', '4, -4', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{x = \\pm 4}', True, ''), ('interval_union', '(1, \\infty)', '\\boxed{(1, +\\infty)}', True, ''), ('interval_union', '(1, \\infty)', '\\boxed{(1, inf)}', True, ''), ('units_text', '5 \\text{ m}', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{5\\text{ meters}}', True, ''), ('units_text', '5 \\text{ m}', '\\boxed{5 \\text{ metres}}', True, ''), ('units_text', '5 \\text{ m}', '\\boxed{5 \\text{ miles}}', False, ''), ('percentage', '50\\%', 'We simplify step by step; 19 was an early slip.\n\n\\boxed{50 \\text{ percent}}', True, ''), ('percentage', '50\\%', '\\boxed{50\\text{\\%}}', True, '')]
for cat, g, o, e, note in rows6:
    out.append({"id": f"h{len(out):04d}", "gold": g, "output": o, "expected": e, "category": cat, "source": "handwritten", "note": note})
rows7 = [('answer_is', '12', 'The answer is 12.\n\nCheck: 12 * 3 = 36, which matches.', True, ''), ('answer_is', '\\frac{5}{12}', '**Answer:** The probability is $\\frac{5}{12}$.', True, ''), ('correction', '6', 'The answer is 5... wait, I need to add one more. So the answer is 6.', True, ''), ('correction', '5', 'The answer is 5... wait, I need to add one more. So the answer is 6.', False, ''), ('answer_is', '12', 'Final Answer\n\n12', True, ''), ('answer_is', '12', '## Final Answer\n$$\\boxed{12}$$', True, ''), ('hedging', '13', "I think it's 12, but it might be 13.", False, ''), ('hedging', '12', "I think it's 12, but it might be 13.", False, ''), ('long_response', '12', 'Step 1: $3 \\times 4 = \\boxed{12}$ apples per row.\n\nStep 2: there are 2 rows, so the total is $\\boxed{24}$.', False, ''), ('long_response', '24', 'Step 1: $3 \\times 4 = \\boxed{12}$ apples per row.\n\nStep 2: there are 2 rows, so the total is $\\boxed{24}$.', True, ''), ('answer_is', '24', '<think>\nok\n</think>\n\n### Solution\n\n1. Rows: $3 \\times 4 = 12$.\n2. Total: $2 \\times 12 = 24$.\n\n### Final Answer\nThe total number of apples is $\\boxed{24}$.', True, ''), ('answer_is', '24', '<think>\nok\n</think>\n\n### Solution\n\n1. Rows: $3 \\times 4 = 12$.\n2. Total: $2 \\times 12 = 24$.\n\n### Final Answer\nThe total number of apples is $\\boxed{12}$.', False, ''), ('bare_sentence', '24', 'The total number of apples is **24**.', True, ''), ('bare_sentence', '24', 'Total apples: 24', True, ''), ('bare_sentence', '24', 'So we have 2 x 12 = 24 apples in total.', True, ''), ('bare_sentence', '24', 'So we have 2 x 12 = 24 apples in total. But we gave away 4, leaving 20.', False, ''), ('bare_sentence', '\\frac{1}{2}', 'The probability is 1/2.', True, ''), ('bare_sentence', '\\frac{1}{2}', 'Hence the probability equals $\\frac{1}{2}$.', True, ''), ('bare_sentence', '7', 'x = 7', True, ''), ('hedging', '7', 'x = 7 or x = -7', False, ''), ('bare_sentence', '7', '$$x = 7$$', True, ''), ('hedging', '6', 'It might be \\boxed{5}.\n\nOr it could be \\boxed{6}.', False, ''), ('hedging', '5', 'It might be \\boxed{5}.\n\nOr it could be \\boxed{6}.', False, ''), ('long_response', '4', 'First guess: \\boxed{3}\n\nThat fails the check. Therefore the answer is \\boxed{4}.', True, ''), ('long_response', '3', 'First guess: \\boxed{3}\n\nThat fails the check. Therefore the answer is \\boxed{4}.', False, '')]
for cat, g, o, e, note in rows7:
    out.append({"id": f"h{len(out):04d}", "gold": g, "output": o, "expected": e, "category": cat, "source": "handwritten", "note": note})
rows8 = [('units_text', '\\$1.50', '<think>\nChecking; 19 is not it.\n</think>\n<answer>1.5</answer>', True, 'answer: 1.5'), ('units_text', '\\$1.50', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{\\$1.05}$.', False, 'answer: \\$1.05'), ('units_text', '10\\text{ inches}', '<think>\nChecking; 19 is not it.\n</think>\n<answer>10</answer>', True, 'answer: 10'), ('units_text', '\\frac{1}{2}\\text{ hour}', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{0.5 \\text{ hours}}$.', True, 'answer: 0.5 \\text{ hours}'), ('interval_union', 'x\\in[2,3]', '<think>\nChecking; 19 is not it.\n</think>\n<answer>[2,3]</answer>', True, 'answer: [2,3]'), ('interval_union', '\\{x \\mid x > 2\\}', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{(2, \\infty)}$.', True, 'answer: (2, \\infty)'), ('interval_union', '\\{x \\mid x > 2\\}', '<think>\nChecking; 19 is not it.\n</think>\n<answer>[2, \\infty)</answer>', False, 'answer: [2, \\infty)'), ('interval_union', '\\left[ \\frac{1}{2}, 1 \\right)', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{[0.5, 1)}$.', True, 'answer: [0.5, 1)'), ('gold_formats', '2:3', '<think>\nChecking; 19 is not it.\n</think>\n<answer>2:3</answer>', True, 'answer: 2:3'), ('log_trig_exp', '\\sqrt[3]{4}', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{4^{1/3}}$.', True, 'answer: 4^{1/3}'), ('log_trig_exp', '\\sqrt[3]{4}', '<think>\nChecking; 19 is not it.\n</think>\n<answer>\\sqrt[3]{2}</answer>', False, 'answer: \\sqrt[3]{2}'), ('symbolic_simplify', '\\binom{6}{2}', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{15}$.', True, 'answer: 15'), ('log_trig_exp', '\\log_{2} 5', '<think>\nChecking; 19 is not it.\n</think>\n<answer>\\log_2 5</answer>', True, 'answer: \\log_2 5'), ('log_trig_exp', '\\log_{2} 5', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{\\frac{\\ln 5}{\\ln 2}}$.', True, 'answer: \\frac{\\ln 5}{\\ln 2}'), ('log_trig_exp', '\\log_{2} 5', '<think>\nChecking; 19 is not it.\n</think>\n<answer>\\log_5 2</answer>', False, 'answer: \\log_5 2'), ('log_trig_exp', 'e^{i\\pi/4}', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{\\frac{\\sqrt2}{2} + \\frac{\\sqrt2}{2}i}$.', True, 'answer: \\frac{\\sqrt2}{2} + \\frac{\\sqrt2}{2}i'), ('log_trig_exp', '\\cos \\frac{\\pi}{5}', '<think>\nChecking; 19 is not it.\n</think>\n<answer>\\frac{1+\\sqrt{5}}{4}</answer>', True, 'answer: \\frac{1+\\sqrt{5}}{4}'), ('log_trig_exp', '\\arctan 2', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{\\tan^{-1} 2}$.', True, 'answer: \\tan^{-1} 2'), ('gold_formats', '\\dfrac{\\sqrt{5}-1}{2}', '<think>\nChecking; 19 is not it.\n</think>\n<answer>\\frac{-1+\\sqrt5}{2}</answer>', True, 'answer: \\frac{-1+\\sqrt5}{2}'), ('gold_formats', '\\dfrac{\\sqrt{5}-1}{2}', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{\\frac{1+\\sqrt5}{2}}$.', False, 'answer: \\frac{1+\\sqrt5}{2}'), ('equation', 'p = 3, q = 5', '<think>\nChecking; 19 is not it.\n</think>\n<answer>p=3, q=5</answer>', True, 'answer: p=3, q=5'), ('equation', 'p = 3, q = 5', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{p=5, q=3}$.', False, 'answer: p=5, q=3'), ('symbolic_simplify', '\\text{Devon}', '<think>\nChecking; 19 is not it.\n</think>\n<answer>Devon</answer>', True, 'answer: Devon'), ('multiple_choice', '\\textbf{(C) }\\frac{5}{7}', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{C}$.', True, 'answer: C'), ('multiple_choice', '\\textbf{(C) }\\frac{5}{7}', '<think>\nChecking; 19 is not it.\n</think>\n<answer>\\textbf{(C)}</answer>', True, 'answer: \\textbf{(C)}'), ('multiple_choice', '\\textbf{(C) }\\frac{5}{7}', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{D}$.', False, 'answer: D'), ('multiple_choice', '\\textbf{(C) }\\frac{5}{7}', '<think>\nChecking; 19 is not it.\n</think>\n<answer>\\frac{5}{7}</answer>', True, 'answer: \\frac{5}{7}'), ('multiple_choice', '\\text{(D) } 24', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{(D)}$.', True, 'answer: (D)'), ('multiple_choice', '\\text{(D) } 24', '<think>\nChecking; 19 is not it.\n</think>\n<answer>24</answer>', True, 'answer: 24'), ('multiple_choice', '\\text{(D) } 24', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{(C)}$.', False, 'answer: (C)'), ('symbolic_simplify', '\\angle ABC = 30^\\circ', '<think>\nChecking; 19 is not it.\n</think>\n<answer>30^\\circ</answer>', True, 'answer: 30^\\circ'), ('symbolic_simplify', '\\overline{AB}', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{\\overline{AB}}$.', True, 'answer: \\overline{AB}'), ('units_text', '1\\frac{3}{4}\\text{ cups}', '<think>\nChecking; 19 is not it.\n</think>\n<answer>1.75</answer>', True, 'answer: 1.75'), ('units_text', '\\$\\$42', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{42}$.', True, 'answer: 42'), ('units_text', '3 \\sqrt{2} \\text{ cm}', '<think>\nChecking; 19 is not it.\n</think>\n<answer>3\\sqrt{2}</answer>', True, 'answer: 3\\sqrt{2}'), ('units_text', '3 \\sqrt{2} \\text{ cm}', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{2\\sqrt{3}}$.', False, 'answer: 2\\sqrt{3}'), ('gold_formats', '\\frac{3}{2}x - 1', '<think>\nChecking; 19 is not it.\n</think>\n<answer>1.5x - 1</answer>', True, 'answer: 1.5x - 1'), ('equation', 'a_n = 2n + 1', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{2n+1}$.', True, 'answer: 2n+1'), ('equation', 'a_n = 2n + 1', '<think>\nChecking; 19 is not it.\n</think>\n<answer>2n-1</answer>', False, 'answer: 2n-1'), ('symbolic_simplify', '2^{n} - 1', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{2^n - 1}$.', True, 'answer: 2^n - 1'), ('symbolic_simplify', 'n!', '<think>\nChecking; 19 is not it.\n</think>\n<answer>n!</answer>', True, 'answer: n!'), ('symbolic_simplify', '\\frac{n(n+1)(2n+1)}{6}', 'Working through the problem (a first attempt gave 19).\n\nThe final answer is $\\boxed{\\frac{2n^3+3n^2+n}{6}}$.', True, 'answer: \\frac{2n^3+3n^2+n}{6}')]
for cat, g, o, e, note in rows8:
    out.append({"id": f"h{len(out):04d}", "gold": g, "output": o, "expected": e, "category": cat, "source": "handwritten", "note": note})
rows9 = [('percentage', '0.5', '\\boxed{50}', False, ''), ('percentage', '50', 'Let me work through it; 19 is a distractor.\n\n\\boxed{0.5}', False, ''), ('text_answer', '\\text{even}', '\\boxed{\\text{not even}}', False, ''), ('hedging', 'B', 'Let me work through it; 19 is a distractor.\n\nThe answer is both B and D.', False, ''), ('hedging', 'B', '\\boxed{B, D}', False, ''), ('infinity', '-\\infty', 'Let me work through it; 19 is a distractor.\n\n\\boxed{\\infty}', False, ''), ('text_answer', '\\text{yes}', 'The answer is yes, because 4 is even.', True, ''), ('text_answer', '\\text{no}', 'Let me work through it; 19 is a distractor.\n\nThe answer is yes, because 4 is even.', False, ''), ('set_list', '\\frac{1}{7}', '\\boxed{0.142857}', True, ''), ('symbolic_simplify', '\\frac{1}{3}', 'Let me work through it; 19 is a distractor.\n\n\\boxed{\\approx 0.33}', False, ''), ('near_miss_qualifier', '2', 'Let me work through it; 19 is a distractor.\n\n\\boxed{2 + 2 = 5}', False, ''), ('hedging', '5', '\\boxed{5 \\text{ or more}}', False, ''), ('near_miss_qualifier', '5', 'Let me work through it; 19 is a distractor.\n\n\\boxed{\\ge 5}', False, ''), ('symbolic_simplify', '5', '\\boxed{x \\ge 5}', False, ''), ('near_miss_qualifier', '5', 'Let me work through it; 19 is a distractor.\n\n\\boxed{5+}', False, ''), ('near_miss_qualifier', '5', '\\boxed{at least 5}', False, ''), ('text_answer', '5', 'Let me work through it; 19 is a distractor.\n\n\\boxed{\\text{at most } 5}', False, ''), ('near_miss_qualifier', '5', '\\boxed{5k}', False, ''), ('near_miss_qualifier', '5', 'Let me work through it; 19 is a distractor.\n\n\\boxed{5^{\\circ}}', True, ''), ('near_miss_qualifier', '10', '\\boxed{10!}', False, ''), ('percentage', '3', 'Let me work through it; 19 is a distractor.\n\n\\boxed{3\\%}', True, ''), ('near_miss_qualifier', '3', '\\boxed{-3}', False, ''), ('near_miss_qualifier', '1', 'Let me work through it; 19 is a distractor.\n\n\\boxed{\\frac{1}{1}}', True, ''), ('set_list', '1', '\\boxed{1,1}', True, ''), ('set_list', '(1,1)', 'Let me work through it; 19 is a distractor.\n\n\\boxed{1}', False, ''), ('set_list', '[0,1]', '\\boxed{0, 1}', False, ''), ('set_list', '\\{0,1\\}', 'Let me work through it; 19 is a distractor.\n\n\\boxed{[0,1]}', False, ''), ('symbolic_simplify', 'x^2', '\\boxed{x^2 + C}', False, ''), ('hedging', '2', 'Let me work through it; 19 is a distractor.\n\n\\boxed{\\sqrt{4} \\text{ or } -\\sqrt{4}}', False, ''), ('symbolic_simplify', '\\frac{1}{2}', '\\boxed{\\frac{1}{2}x}', False, ''), ('symbolic_simplify', '\\frac{x}{2}', 'Let me work through it; 19 is a distractor.\n\n\\boxed{\\frac{1}{2}}', False, ''), ('hedging', '6', '\\boxed{6}\\boxed{6}\\boxed{7}', False, ''), ('hedging', '12', 'Let me work through it; 19 is a distractor.\n\nThe answer is \\boxed{12} or \\boxed{12}.', True, ''), ('near_miss_qualifier', '0', '\\boxed{}', False, ''), ('symbolic_simplify', '0', 'Let me work through it; 19 is a distractor.\n\n\\boxed{\\text{undefined}}', False, ''), ('near_miss_qualifier', '0', '\\boxed{\\emptyset}', False, ''), ('near_miss_qualifier', '\\emptyset', 'Let me work through it; 19 is a distractor.\n\n\\boxed{\\{0\\}}', False, ''), ('text_answer', '\\text{none}', '\\boxed{\\emptyset}', False, '')]
for cat, g, o, e, note in rows9:
    out.append({"id": f"h{len(out):04d}", "gold": g, "output": o, "expected": e, "category": cat, "source": "handwritten", "note": note})
rows10 = [('inequality', 'x \\le -2 \\text{ or } x \\ge 3', '\\boxed{(-\\infty,-2] \\cup [3,\\infty)}', True, ''), ('inequality', '(-\\infty,-2] \\cup [3,\\infty)', 'Solving the system (an early slip gave 19):\n\n\\boxed{x \\le -2 \\text{ or } x \\ge 3}', True, ''), ('inequality', '(-\\infty,-2] \\cup [3,\\infty)', '\\boxed{x < -2 \\text{ or } x \\ge 3}', False, ''), ('interval_union', 'x \\in (-\\infty, -2] \\cup [3, \\infty)', 'Solving the system (an early slip gave 19):\n\n\\boxed{(-\\infty,-2]\\cup[3,\\infty)}', True, ''), ('inequality', '[-2, 3]', '\\boxed{-2 ≤ x ≤ 3}', True, ''), ('inequality', '(-2,3)', 'Solving the system (an early slip gave 19):\n\n\\boxed{x < 3 \\text{ and } x > -2}', True, ''), ('inequality', '(-2,3)', '\\boxed{x < 3 \\text{ and } x > 2}', False, ''), ('equation', 'x = 2, y = 3', 'Solving the system (an early slip gave 19):\n\n\\boxed{(2, 3)}', True, ''), ('interval_union', '(2,3)', '\\boxed{x=2 \\text{ and } y=3}', True, ''), ('equation', 'x=1', 'Solving the system (an early slip gave 19):\n\n\\boxed{x=1.0}', True, ''), ('interval_union', '2, 3', '\\boxed{x_1 = 2, x_2 = 3}', True, ''), ('equation', 'x_1 = 2, x_2 = 3', 'Solving the system (an early slip gave 19):\n\n\\boxed{x_1 = 3, x_2 = 2}', True, ''), ('equation', 'x_1 = 2, x_2 = 3', '\\boxed{x_1 = 3, x_2 = 4}', False, ''), ('equation', 'a = 1, b = 2', 'Solving the system (an early slip gave 19):\n\n\\boxed{b = 2, a = 1}', True, ''), ('equation', 'a = 1, b = 2', '\\boxed{a = 2, b = 1}', False, ''), ('equation', 'a = 1, b = 2', 'Solving the system (an early slip gave 19):\n\n\\boxed{a=1}', False, '')]
for cat, g, o, e, note in rows10:
    out.append({"id": f"h{len(out):04d}", "gold": g, "output": o, "expected": e, "category": cat, "source": "handwritten", "note": note})

with open(sys.argv[1], "w") as f:
    for d in out:
        f.write(json.dumps(d, ensure_ascii=False) + "\n")
n = len(out); nf = sum(not d["expected"] for d in out)
print(n, "cases", nf, "false", round(nf / n, 2))
