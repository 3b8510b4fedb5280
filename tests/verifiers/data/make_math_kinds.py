"""Writes tests/verifiers/data/math_kinds.jsonl: handwritten cases for the error kinds of issue 20.

Same format as the development set (id, gold, output, expected, category, source, note), plus two optional
fields the bench passes through to the request: ``prompt`` (the problem statement: a rounding request lives
there) and ``options`` (the request's options map). Each kind has several phrasings, with positives and the
matching negatives (a rounded value nobody asked for, a genuinely different second box, a wrong letter...).

    python tests/verifiers/data/make_math_kinds.py tests/verifiers/data/math_kinds.jsonl
"""
import json
import sys

C = []


def add(cat, gold, output, expected, note="", prompt=None, options=None):
    row = {"gold": gold, "output": output, "expected": expected, "category": cat, "source": "handwritten", "note": note}
    if prompt is not None:
        row["prompt"] = prompt
    if options is not None:
        row["options"] = options
    C.append(row)


R = "Let me work through this carefully. Setting up the equation and simplifying step by step gives the result.\n\n"

# --- a rounded decimal for an exact irrational gold: only when the prompt asks for rounding -----------------
cat = "rounding_irrational"
add(cat, "\\pi", R + "The answer is $\\boxed{3.14}$.", False, "no rounding asked")
add(cat, "\\pi", R + "Therefore the ratio is $\\boxed{3.14159}$.", False, "no rounding asked, more digits")
add(cat, "2\\sqrt{2}", R + "So the distance is $\\boxed{2.83}$.", False)
add(cat, "2\\sqrt{2}", R + "So the distance is $\\boxed{2.828427}$.", False)
add(cat, "\\frac{\\sqrt{3}}{2}", R + "Final Answer: The final answer is $0.866$. I hope it is correct.", False)
add(cat, "4\\pi", R + "The area is \\(\\boxed{12.57}\\) square units.", False)
add(cat, "\\sqrt{5}", "<think>sqrt 5 is about 2.236</think>\nThe length is $\\boxed{2.236}$.", False)
add(cat, "e^2", R + "#### 7.389", False)
add(cat, "\\ln 2", R + "The answer is $\\boxed{0.693}$", False)
add(cat, "10\\sqrt{3}", R + "The height is $\\boxed{17.32}$ meters.", False)
add(cat, "\\pi", R + "The answer is $\\boxed{3.14}$.", True, "prompt asks for hundredths", prompt="Compute the ratio of the circumference to the diameter. Round your answer to the nearest hundredth.")
add(cat, "\\pi", R + "The answer is $\\boxed{3.1}$.", False, "rounded more coarsely than asked", prompt="Compute the ratio. Round your answer to the nearest hundredth.")
add(cat, "\\pi", R + "The answer is $\\boxed{3.15}$.", False, "wrong rounding", prompt="Compute the ratio. Round your answer to the nearest hundredth.")
add(cat, "2\\sqrt{2}", R + "So the distance is $\\boxed{2.83}$.", True, prompt="Find the distance between the points. Express your answer as a decimal to the nearest hundredth.")
add(cat, "2\\sqrt{2}", R + "So the distance is $\\boxed{2.8}$.", True, prompt="Find the distance between the points, rounded to one decimal place.")
add(cat, "2\\sqrt{2}", R + "So the distance is $\\boxed{2.9}$.", False, prompt="Find the distance between the points, rounded to one decimal place.")
add(cat, "4\\pi", R + "The area is $\\boxed{12.566}$.", True, prompt="What is the area of the circle? Give your answer correct to three decimal places.")
add(cat, "10\\sqrt{3}", R + "The height is $\\boxed{17}$ meters.", True, prompt="How tall is the tower? Round to the nearest whole number.")
add(cat, "10\\sqrt{3}", R + "The height is $\\boxed{18}$ meters.", False, prompt="How tall is the tower? Round to the nearest whole number.")
add(cat, "100\\pi", R + "The volume is $\\boxed{314.16}$.", True, prompt="Find the volume to 2 decimal places.")
add(cat, "100\\pi", R + "The volume is $\\boxed{314}$.", False, "integer for a hundredths request", prompt="Find the volume to 2 decimal places.")
add(cat, "\\frac{\\pi}{4}", R + "The probability is $\\boxed{0.785}$.", True, prompt="Express the probability as a decimal rounded to the nearest thousandth.")
add(cat, "\\frac{\\pi}{4}", R + "The probability is $\\boxed{\\frac{\\pi}{4}}$.", True, "exact answer to a rounding prompt", prompt="Express the probability as a decimal rounded to the nearest thousandth.")
add(cat, "3.14", R + "The answer is $\\boxed{3.14}$.", True, "the gold is a decimal at that precision")
add(cat, "1.414", R + "The answer is $\\boxed{\\sqrt{2}}$.", True, "gold decimal, exact answer")
add(cat, "\\sqrt{2}", R + "The answer is $\\boxed{\\frac{2}{\\sqrt{2}}}$.", True, "exact form")
add(cat, "\\sqrt{2}", R + "The answer is $\\boxed{1.41}$.", False, prompt="Find the side length of the square with diagonal 2.")

# --- several boxes: a hedge is never a multi-part answer ---------------------------------------------------
cat = "boxed_hedge"
add(cat, "2, 3", R + "So $x = \\boxed{2}$. Hmm, or maybe it is $\\boxed{3}$?", False)
add(cat, "2, 3", R + "The answer is $\\boxed{2}$, or perhaps $\\boxed{3}$.", False)
add(cat, "2, 3", R + "I think it's \\boxed{2}, but I'm not sure; it could also be \\boxed{3}.", False)
add(cat, "-1, 4", R + "The root is $\\boxed{-1}$. Alternatively, the root might be $\\boxed{4}$.", False)
add(cat, "(1, 2)", R + "Possibly $\\boxed{1}$ or possibly $\\boxed{2}$.", False)
add(cat, "2, 3", R + "The solutions are $x = \\boxed{2}$ and $x = \\boxed{3}$.", True, "genuine two-part answer")
add(cat, "2, 3", R + "$\\boxed{2}$ \\quad and \\quad $\\boxed{3}$", True)
add(cat, "-1, 4", R + "Thus $x=\\boxed{-1}$ or $x=\\boxed{4}$.", True, "two roots joined by 'or'")
add(cat, "5", R + "It is either $\\boxed{5}$ or $\\boxed{6}$, I am not certain.", False)
add(cat, "5", R + "Maybe $\\boxed{4}$? Or maybe $\\boxed{5}$?", False)
add(cat, "2, 3", R + "So $x=\\boxed{2}$ and $x=\\boxed{7}$.", False, "a genuinely different second box")

# --- self-correction: judged on the final answer ------------------------------------------------------------
cat = "self_correction"
add(cat, "6", R + "So the answer is $\\boxed{5}$. Wait, that's wrong: I dropped a term. The answer is $\\boxed{6}$.", True)
add(cat, "6", R + "$\\boxed{5}$\n\nActually, I made a mistake above. Correcting it: $\\boxed{6}$", True)
add(cat, "6", R + "\\boxed{5} -- no, that is incorrect; it should be \\boxed{6}.", True)
add(cat, "\\frac{1}{3}", R + "Thus $\\boxed{\\frac{1}{2}}$. Oops, let me recheck: the denominator is 3, so $\\boxed{\\frac{1}{3}}$.", True)
add(cat, "6", R + "So the answer is $\\boxed{6}$. Wait, that's wrong. The answer is $\\boxed{5}$.", False, "corrected away from the gold")
add(cat, "\\frac{1}{3}", R + "Thus $\\boxed{\\frac{1}{3}}$. Hmm, that is wrong; correcting, $\\boxed{\\frac{1}{2}}$.", False)
add(cat, "2, 3", R + "$x=\\boxed{2}$. Wait, I forgot the other root. Correction: $x = \\boxed{2, 3}$.", True)
add(cat, "2, 3", R + "$x=\\boxed{3}$. Wait, that was wrong, it is $x = \\boxed{2}$.", False, "final answer has one of two parts")
cat = "box_chain"
add(cat, "\\frac{1}{2}", R + "The probability is $\\boxed{\\frac12} = \\boxed{0.5}$.", True)
add(cat, "0.5", R + "The probability is $\\boxed{\\frac{1}{2}} = \\boxed{0.5}$.", True)
add(cat, "\\frac{3}{4}", R + "So $\\boxed{\\frac{3}{4}}=\\boxed{75\\%}$", True)
add(cat, "\\frac{\\sqrt{2}}{2}", R + "Therefore $\\boxed{\\frac{\\sqrt{2}}{2}} \\approx \\boxed{0.707}$.", True)
add(cat, "\\frac{1}{2}", R + "The probability is $\\boxed{\\frac13} = \\boxed{0.333}$.", False)
add(cat, "\\frac{1}{2}, \\frac{1}{3}", R + "The probability is $\\boxed{\\frac12} = \\boxed{0.5}$.", False, "one value for a two-part gold")

# --- units in \text{} / \mathrm{} after the number when the gold has none -----------------------------------
cat = "units_text"
add(cat, "12", R + "The area is $\\boxed{12\\text{ cm}^2}$.", True)
add(cat, "12", R + "The area is $\\boxed{12\\,\\mathrm{cm}^{2}}$.", True)
add(cat, "9\\pi", R + "The area is $\\boxed{9\\pi \\text{ square units}}$.", True)
add(cat, "9\\pi", R + "The area is $\\boxed{9\\pi\\ \\text{cm}^2}$.", True)
add(cat, "15", R + "The speed is $\\boxed{15 \\text{ m/s}}$.", True)
add(cat, "60", R + "The speed is $\\boxed{60\\ \\mathrm{km/h}}$.", True)
add(cat, "60", R + "The speed is $\\boxed{60 \\text{ km}/\\text{h}}$.", True)
add(cat, "45", R + "Final Answer: The final answer is $45\\text{ miles per hour}$. I hope it is correct.", True)
add(cat, "\\frac{25}{2}", R + "The area is $\\boxed{\\frac{25}{2}\\text{ m}^2}$.", True)
add(cat, "12", R + "The area is $\\boxed{13\\text{ cm}^2}$.", False)
add(cat, "9\\pi", R + "The area is $\\boxed{9 \\text{ square units}}$.", False)
add(cat, "15", R + "The speed is $\\boxed{1.5 \\text{ m/s}}$.", False)
add(cat, "60", R + "The speed is $\\boxed{16 \\,\\mathrm{km/h}}$.", False)
add(cat, "5 \\text{ m}", R + "The length is $\\boxed{5\\text{ cm}}$.", False, "different unit")

# --- multiple choice: letter and value ------------------------------------------------------------------------
cat = "choice_letter_value"
add(cat, "C", R + "The answer is $\\boxed{(C)\\ 12}$.", True)
add(cat, "C", R + "The answer is $\\boxed{\\textbf{(C)}\\ 12}$.", True)
add(cat, "C", R + "The answer is $\\boxed{C: 12}$.", True)
add(cat, "C", R + "So the correct option is \\boxed{C.\\ \\frac{5}{7}}", True)
add(cat, "\\text{(B)}", R + "The answer is $\\boxed{\\text{B) } 2\\sqrt{3}}$.", True)
add(cat, "B", R + "Answer: (B) $2\\sqrt{3}$", True)
add(cat, "C", R + "The answer is $\\boxed{(D)\\ 12}$.", False)
add(cat, "C", R + "The answer is $\\boxed{D: 12}$.", False)
add(cat, "\\text{(B)}", R + "The answer is $\\boxed{\\text{A) } 2\\sqrt{3}}$.", False)
add(cat, "B", R + "Answer: (E) $2\\sqrt{3}$", False)
add(cat, "12", R + "The answer is $\\boxed{(C)\\ 12}$.", True, "value gold, letter and value answer")
add(cat, "12", R + "The answer is $\\boxed{(C)\\ 13}$.", False)

# --- set difference vs union of intervals --------------------------------------------------------------------
cat = "set_difference"
add(cat, "(-\\infty, 1) \\cup (3, \\infty)", R + "The domain is $\\boxed{\\mathbb{R}\\setminus[1,3]}$.", True)
add(cat, "(-\\infty,1]\\cup[3,\\infty)", R + "The domain is $\\boxed{\\mathbb{R}\\setminus(1,3)}$.", True)
add(cat, "(-\\infty, 0) \\cup (0, \\infty)", R + "The domain is $\\boxed{\\mathbb{R} \\setminus \\{0\\}}$.", True)
add(cat, "(-\\infty,-2)\\cup(-2,2)\\cup(2,\\infty)", R + "The domain is $\\boxed{\\mathbb{R}\\backslash\\{-2, 2\\}}$.", True)
add(cat, "\\mathbb{R} \\setminus [-1, 2]", R + "So $x \\in \\boxed{(-\\infty,-1)\\cup(2,\\infty)}$.", True, "gold as the difference")
add(cat, "(-\\infty, 1) \\cup (3, \\infty)", R + "The domain is $\\boxed{\\mathbb{R}\\setminus(1,3)}$.", False, "closed vs open ends")
add(cat, "(-\\infty, 1) \\cup (3, \\infty)", R + "The domain is $\\boxed{\\mathbb{R}\\setminus[1,4]}$.", False)
add(cat, "(-\\infty, 0) \\cup (0, \\infty)", R + "The domain is $\\boxed{\\mathbb{R} \\setminus \\{1\\}}$.", False)
add(cat, "\\mathbb{R} \\setminus [-1, 2]", R + "So $x \\in \\boxed{(-\\infty,-1]\\cup[2,\\infty)}$.", False)

# --- decimal comma ------------------------------------------------------------------------------------------
cat = "decimal_comma"
add(cat, "2.74", R + "The result is $\\boxed{2,74}$.", True)
add(cat, "2.74", R + "The result is $\\boxed{2{,}74}$.", True)
add(cat, "0.5", R + "Die Wahrscheinlichkeit ist $\\boxed{0,5}$.", True)
add(cat, "-3.25", R + "So $x = \\boxed{-3,25}$.", True)
add(cat, "2.74", R + "The result is $\\boxed{2,75}$.", False)
add(cat, "2, 74", R + "The values are $\\boxed{2,74}$.", True, "a list gold: the comma separates")
add(cat, "274", R + "The result is $\\boxed{2,74}$.", False)
add(cat, "1234", R + "The result is $\\boxed{1,234}$.", True, "thousands separator under auto")
add(cat, "1.234", R + "The result is $\\boxed{1,234}$.", True, "decimal comma forced", options={"decimal_comma": "always"})
add(cat, "2.74", R + "The result is $\\boxed{2,74}$.", False, "decimal comma turned off", options={"decimal_comma": "never"})

# --- LaTeX with doubled backslashes (JSON-escaped data) ---------------------------------------------------------
cat = "doubled_backslash"
add(cat, "\\frac{1}{2}", R + "The answer is $\\\\boxed{\\\\frac{1}{2}}$.", True)
add(cat, "x \\le 3", R + "So the solution is $\\\\boxed{x \\\\le 3}$.", True)
add(cat, "x \\le 3", R + "So the solution is $\\\\boxed{x \\\\ge 3}$.", False)
add(cat, "[2, \\infty)", R + "Therefore $\\\\boxed{x \\\\geq 2}$.", True)
add(cat, "\\\\frac{\\\\sqrt{3}}{2}", R + "The value is $\\boxed{\\frac{\\sqrt3}{2}}$.", True, "doubled gold")
add(cat, "\\frac{\\sqrt{3}}{2}", R + "The value is \\\\(\\\\dfrac{\\\\sqrt{3}}{2}\\\\).", True)
add(cat, "\\frac{\\sqrt{3}}{2}", R + "The value is \\\\(\\\\dfrac{\\\\sqrt{2}}{2}\\\\).", False)
add(cat, "\\{1, 2\\}", R + "The set is $\\\\boxed{\\\\{1, 2\\\\}}$.", True)
add(cat, "(-\\infty, 3]", R + "The answer is $\\\\boxed{(-\\\\infty, 3]}$", True)
add(cat, "(-\\infty, 3]", R + "The answer is $\\\\boxed{(-\\\\infty, 3)}$", False)

# --- 'or' / 'and' joining equations without spaces ----------------------------------------------------------
cat = "or_and_unspaced"
add(cat, "2, 3", R + "The solutions are $\\boxed{x=2orx=3}$.", True)
add(cat, "-1, 4", R + "$\\boxed{x=-1\\text{or}x=4}$", True)
add(cat, "-1, 4", R + "$\\boxed{x=-1\\mathrm{or}x=4}$", True)
add(cat, "x=1, y=2", R + "$\\boxed{x=1andy=2}$", True)
add(cat, "x=1, y=2", R + "$\\boxed{x=1\\text{and}y=2}$", True)
add(cat, "2, 3", R + "The solutions are $\\boxed{x=2orx=5}$.", False)
add(cat, "x=1, y=2", R + "$\\boxed{x=2andy=1}$", False)
add(cat, "-1, 4", R + "$\\boxed{x=1\\text{or}x=4}$", False)

# --- cheap to decide, expensive looking ---------------------------------------------------------------------
cat = "cheap_structural"
add(cat, "0", R + "$\\boxed{2^{100000} - 2^{100000}}$", True)
add(cat, "0", R + "$\\boxed{7^{123456} - 7^{123456}}$", True)
add(cat, "5", R + "$\\boxed{3^{99999}+5-3^{99999}}$", True)
add(cat, "1", R + "$\\boxed{2^{100000} - 2^{100000}}$", False)
add(cat, "0", R + "$\\boxed{2^{100000} - 2^{100001}}$", False)
add(cat, "300", R + "$\\boxed{" + "+".join(["1"] * 300) + "}$", True)
add(cat, "301", R + "$\\boxed{" + "+".join(["1"] * 300) + "}$", False)
add(cat, "250", R + "$\\boxed{" + " + ".join(["1"] * 250) + "}$", True)
add(cat, "42", R + "$\\boxed{\\underbrace{42}_{\\text{the answer}}}$", True)
add(cat, "42", R + "$\\boxed{\\underbrace{41}_{\\text{the answer}}}$", False)
add(cat, "2n", R + "$\\boxed{\\underbrace{n + n}_{\\text{two terms}}}$", True)
add(cat, "10", R + "$\\boxed{\\overbrace{10}^{\\text{ten}}}$", True)

# --- a completion without an answer ---------------------------------------------------------------------------
cat = "no_answer_hedge"
for text in ("I am not sure.", "I don't know.", "I cannot determine the answer.", "It is impossible to determine from the given information.",
             "Sorry, I'm not able to solve this problem.", "I do not know the answer to this question.",
             R + "After all this, I am still not sure what the answer is.", R + "Unfortunately I cannot determine the value of x."):
    add(cat, "12", text, False, "no answer: NO_ANSWER, not INCORRECT")

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/verifiers/data/math_kinds.jsonl"
    seen = set()
    with open(out, "w") as f:
        for i, row in enumerate(C):
            key = (row["gold"], row["output"], row.get("prompt"), json.dumps(row.get("options")))
            assert key not in seen, row
            seen.add(key)
            f.write(json.dumps({"id": f"k{i:04d}", **row}) + "\n")
    print(f"{len(C)} cases, {sum(not r['expected'] for r in C)} labelled false -> {out}")
