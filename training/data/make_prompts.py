"""Instructions for self-distilling the demo heads (written for toki; no dataset copied).

Combines hand-written task templates with hand-written topic lists, shuffles with a fixed
seed and writes `prompts.jsonl` (round 1) and `prompts-2.jsonl` (round 2: new lists, none
of round 1, the bench prompts or Spec-Bench) ({"category", "prompt"} per line).
Deterministic: `python3 training/data/make_prompts.py` always writes the same files.
"""
import itertools, json, random, pathlib

random.seed(20261202)

langs = ["Python", "JavaScript", "Rust", "C", "Go", "Java", "TypeScript", "Bash", "SQL", "C++"]
code_tasks = [
    "reverses a string", "checks whether a number is prime", "computes the factorial of n",
    "returns the n-th Fibonacci number", "sorts a list of integers with bubble sort",
    "counts the vowels in a string", "finds the largest element of an array",
    "merges two sorted lists", "removes duplicates from a list", "checks if a word is a palindrome",
    "converts Celsius to Fahrenheit", "computes the average of a list of numbers",
    "reads a file and counts its lines", "implements binary search", "flattens a nested list",
    "computes the greatest common divisor of two numbers", "capitalizes every word in a sentence",
    "validates an email address with a simple check", "returns the sum of the digits of a number",
    "implements a stack with push and pop", "transposes a matrix", "counts word frequencies in a text",
    "converts a decimal number to binary", "finds the second largest number in a list",
    "checks whether two strings are anagrams", "generates all subsets of a small set",
    "implements a queue using two stacks", "computes the power of a number recursively",
    "parses a comma separated line into fields", "rotates an array by k positions",
]
code_forms = [
    "Write a {lang} function that {task}.",
    "Show me how to write a {lang} program that {task}.",
    "Implement a function in {lang} that {task}. Add a short comment.",
    "Can you give an example in {lang} of code that {task}?",
    "Write {lang} code that {task}, and explain it briefly.",
]
code_explain = [
    "Explain what a for loop does in {lang}.", "How do I declare a variable in {lang}?",
    "What is the difference between a list and a dictionary in Python?",
    "Explain recursion with a short {lang} example.", "How do I handle errors in {lang}?",
    "What does the return statement do in {lang}?", "Fix this Python code: def add(a, b) return a + b",
    "What is a hash map and when should I use one?", "Explain the time complexity of binary search.",
    "Write a SQL query that selects all users older than 30 from a table named users.",
]

sentences = [
    "The weather is beautiful today.", "I would like a cup of coffee, please.",
    "Where is the nearest train station?", "My brother works as a doctor in a big hospital.",
    "We are going to the beach this weekend.", "Thank you very much for your help.",
    "The library opens at nine in the morning.", "I have been learning to play the guitar.",
    "Could you tell me how much this book costs?", "The children are playing in the garden.",
    "She reads a newspaper every morning.", "Our meeting has been moved to Thursday.",
    "This restaurant serves the best soup in town.", "I lost my keys on the way home.",
    "The museum is closed on Mondays.", "He drinks tea without sugar.",
    "It is raining, so take an umbrella.", "The train leaves in ten minutes.",
    "I am happy to meet you.", "Please close the window, it is cold.",
    "My favourite season is autumn.", "The cat is sleeping on the sofa.",
    "We need to buy bread and milk.", "The concert starts at eight o'clock.",
]
targets = ["French", "Spanish", "German", "Italian", "Portuguese"]
trans_forms = [
    "Translate to {lang}: {s}", "Translate the following sentence into {lang}: \"{s}\"",
    "How do you say \"{s}\" in {lang}?", "Please translate this into {lang}: {s}",
]

topics = [
    "photosynthesis", "the water cycle", "the French Revolution", "black holes", "volcanoes",
    "the human heart", "climate change", "the internet", "honey bees", "the Roman Empire",
    "electric cars", "the Moon", "vaccines", "the printing press", "rainforests", "earthquakes",
    "the Olympic Games", "coral reefs", "solar panels", "the immune system", "dinosaurs",
    "the Great Wall of China", "recycling", "gravity", "the stock market", "tea",
    "the piano", "coffee", "the Amazon river", "glaciers", "the moon landing", "democracy",
    "bicycles", "antibiotics", "the Sahara desert", "whales", "artificial intelligence",
    "chess", "the ancient Egyptians", "the periodic table", "earth's atmosphere",
    "the Renaissance", "nuclear energy", "the human brain", "wind turbines", "penguins",
    "the Silk Road", "electricity", "mountains", "the ocean tides", "DNA", "the Vikings",
    "smartphones", "bread making", "the solar system", "rain", "ants", "the Industrial Revolution",
    "jazz music", "football", "the Eiffel Tower", "sleep", "exercise", "money", "maps", "clocks",
]
qa_forms = [
    "What is {t}?", "Explain {t} in simple terms.", "Why is {t} important?",
    "Give me three interesting facts about {t}.", "How does {t} work?",
    "What should a beginner know about {t}?", "Describe {t} to a ten year old.",
    "What are the main advantages and disadvantages of {t}?",
]
summ_forms = [
    "Summarize in two sentences what you know about {t}.",
    "Write a short summary of the history of {t}.",
    "Give a one-paragraph overview of {t}.",
    "List the key points about {t} as bullet points.",
]
paragraphs = [
    "Our town opened a new public library last month. It has a large children's section, "
    "a quiet reading room and free computers. Many families now visit it every weekend.",
    "The company reported higher sales this year, mostly thanks to its new line of electric "
    "bicycles. It plans to open two more shops and hire fifty new workers.",
    "Yesterday a heavy storm hit the coast. Several trees fell, some roads were closed and "
    "thousands of homes lost power for a few hours. No one was seriously hurt.",
    "Scientists found that people who walk for thirty minutes a day sleep better and feel "
    "less stressed. The study followed two thousand adults for one year.",
    "The school decided to start classes thirty minutes later. Teachers say students are more "
    "awake, and attendance in the first lesson has improved.",
    "A small bakery in the old town has become famous for its cinnamon rolls. People queue "
    "every morning, and the owner now bakes three times as many as last year.",
    "The city council voted to build new bike lanes on the main streets. Supporters say it "
    "will make cycling safer, while some shop owners worry about parking.",
    "A team of volunteers cleaned the river banks on Saturday. They collected more than two "
    "hundred bags of rubbish, mostly plastic bottles and food packaging.",
]
para_forms = ["Summarize this text in one sentence: {p}", "Summarize: {p}",
              "What is the main idea of the following text? {p}",
              "Rewrite this text in simpler words: {p}"]

characters = ["a brave little mouse", "an old lighthouse keeper", "a robot who wants to paint",
              "a young dragon", "a lost puppy", "a curious girl named Mia", "a tired astronaut",
              "a talking tree", "a clever fox", "a shy ghost", "a baker who loves music",
              "two best friends", "a knight who is afraid of the dark", "a cat that can fly"]
settings = ["in a snowy village", "on a distant planet", "at the bottom of the sea",
            "in a busy city", "in an enchanted forest", "on a pirate ship", "in a small school",
            "during a thunderstorm"]
story_forms = ["Write a short story about {c} {s}.", "Tell me a bedtime story about {c} {s}.",
               "Write a poem about {c} {s}.", "Write the opening paragraph of a story about {c} {s}."]
misc = ["Write a polite email asking my manager for a day off.",
        "Give me five tips for studying for an exam.", "Write a shopping list for a week of healthy meals.",
        "How can I improve my sleep?", "Suggest three names for a new coffee shop.",
        "Write a thank-you note to a friend who helped me move.", "Plan a one-day trip to the mountains.",
        "What are some good habits for staying productive?", "Give me a simple recipe for pancakes.",
        "How do I start running as a beginner?", "Write a short speech for a friend's birthday.",
        "What are the benefits of drinking water?", "Explain how to change a flat bicycle tyre.",
        "Write a job advertisement for a part-time librarian.", "Give advice to someone starting university."]

def combine(rng, code_tasks, sentences, topics, paragraphs, characters, settings, misc,
            explain=(), qa_k=None, summ_k=None):
    """One round's (category, prompt) pairs: every list crossed with its forms; `qa_k` and
    `summ_k` forms are sampled per topic (None: all of them)."""
    pick = lambda forms, k: forms if k is None else rng.sample(forms, k)
    out = []
    for lang, task in itertools.product(langs, code_tasks):
        for f in rng.sample(code_forms, 2):
            out.append(("code", f.format(lang=lang, task=task)))
    for lang in langs:
        for f in explain:
            out.append(("code", f.format(lang=lang)))
    for s, lang in itertools.product(sentences, targets):
        for f in rng.sample(trans_forms, 2):
            out.append(("translate", f.format(lang=lang, s=s)))
    for t in topics:
        for f in pick(qa_forms, qa_k):
            out.append(("qa", f.format(t=t)))
        for f in pick(summ_forms, summ_k):
            out.append(("summarize", f.format(t=t)))
    for p in paragraphs:
        for f in para_forms:
            out.append(("summarize", f.format(p=p)))
    for c, s in itertools.product(characters, settings):
        for f in rng.sample(story_forms, 2):
            out.append(("creative", f.format(c=c, s=s)))
    for m in misc:
        out.append(("qa", m))
    return out


def write(name, rng, pairs, skip):
    """Drop repeats and anything in `skip`, shuffle with `rng`, write `name` beside this file."""
    skip, uniq = set(skip), []
    for cat, p in pairs:
        if p not in skip:
            skip.add(p)
            uniq.append((cat, p))
    rng.shuffle(uniq)
    path = pathlib.Path(__file__).with_name(name)
    with path.open("w") as f:
        for cat, p in uniq:
            f.write(json.dumps({"category": cat, "prompt": p}) + "\n")
    print(f"{len(uniq)} prompts -> {path}")
    return uniq


uniq = write("prompts.jsonl", random,
             combine(random, code_tasks, sentences, topics, paragraphs, characters, settings,
                     misc, explain=code_explain), set())

# Round 2 (2026-12-03): new hand-written lists with the same forms, for more distillation
# data. Its own seeded generator, so round 1 above stays byte-identical. Written to
# prompts-2.jsonl; anything already in round 1, in the bench prompts or in Spec-Bench (when
# ../shared/specbench is beside the checkout) is left out.
rng2 = random.Random(20261203)
code_tasks2 = [
    "counts how many times a character appears in a string", "checks whether a list is sorted",
    "returns the longest word in a sentence", "computes the median of a list of numbers",
    "removes all whitespace from a string", "converts a string to title case",
    "finds the index of the smallest element in an array", "computes the sum of a list recursively",
    "checks whether a number is a perfect square", "returns the first n prime numbers",
    "splits a list into chunks of size k", "computes the dot product of two vectors",
    "checks whether a string has balanced parentheses", "returns the intersection of two lists",
    "converts a binary string to a decimal number", "counts the lines in a text that contain a word",
    "computes the factorial of n iteratively", "finds all pairs in a list that add up to a target",
    "returns the most common element of a list", "converts minutes into hours and minutes",
    "generates a random password of a given length", "computes compound interest",
    "checks whether a number is an Armstrong number", "reverses the order of words in a sentence",
    "computes the area of a circle from its radius", "returns the union of two sets",
    "implements insertion sort", "implements a simple linked list with append and print",
    "computes the running total of a list", "checks whether a triangle with three sides is valid",
]
sentences2 = [
    "The bakery on our street opens very early.", "I forgot my umbrella at the office.",
    "Can you recommend a good restaurant nearby?", "My grandmother grows tomatoes in her garden.",
    "The bus was late again this morning.", "We watched a film about the ocean last night.",
    "He is learning to speak three languages.", "The hotel room has a view of the mountains.",
    "I need to charge my phone before we leave.", "The festival takes place every summer.",
    "Our teacher gave us a lot of homework.", "The market is busy on Saturday mornings.",
    "She painted the kitchen bright yellow.", "Let's meet in front of the cinema at seven.",
    "The doctor told me to drink more water.", "This road leads to the old castle.",
    "They have two dogs and a small rabbit.", "The soup is too hot to eat right now.",
    "I usually walk to work when the weather is nice.", "The price of fruit has gone up this year.",
    "Do you know where I can buy a ticket?", "The baby is sleeping, so please be quiet.",
    "We planted an apple tree in the garden.", "My flight was cancelled because of the fog.",
]
topics2 = [
    "the Pyramids of Giza", "lightning", "the human skeleton", "the Great Barrier Reef",
    "the printing of money", "hurricanes", "bees and pollination", "the Internet of Things",
    "the Cold War", "the speed of light", "the Mediterranean diet", "rivers", "the telescope",
    "the Arctic", "elephants", "the metric system", "the Wright brothers", "batteries",
    "the human eye", "deserts", "blockchain", "the Nile river", "octopuses", "the Aztecs",
    "wind", "the history of writing", "cheese making", "sharks", "the light bulb",
    "mushrooms", "the Amazon rainforest", "the immune response to a cold", "comets",
    "the Greek gods", "trains", "the invention of the telephone", "bridges", "rainbows",
    "the human skin", "frogs", "space stations", "the Inca Empire", "cloud computing",
    "yoga", "the violin", "wolves", "tsunamis", "the Statue of Liberty", "recycling plastic",
    "the honeycomb", "meteorites", "the French language", "board games", "skyscrapers",
    "sea turtles", "the calendar", "chocolate", "the Milky Way", "newspapers", "kites",
]
paragraphs2 = [
    "The village held its first food market on Sunday. Farmers sold cheese, bread and fresh "
    "fruit, and a local band played music all afternoon. The organisers hope to repeat it monthly.",
    "A new train line now connects the two largest cities in the region. The journey takes "
    "ninety minutes instead of three hours, and tickets are cheaper for students.",
    "The zoo welcomed a baby giraffe last week. The calf is healthy and already walking, and "
    "visitors can see it from a special viewing area near the entrance.",
    "Researchers tested a robot that helps farmers pick strawberries. It works at night and can "
    "tell ripe fruit from unripe fruit, but it is still slower than an experienced worker.",
    "The town's swimming pool will close for repairs this winter. The roof needs to be replaced, "
    "and the council says the work will take about four months.",
    "A local author published her first novel about growing up near the sea. The book sold out "
    "in the town's only bookshop within a week, and a second printing is planned.",
    "More people are working from home than five years ago. Many say they save time and money, "
    "but some miss talking to colleagues and find it hard to stop working in the evening.",
    "Students at the high school built a small weather station on the roof. They share the "
    "temperature and rainfall online every day, and the data is used in science lessons.",
]
characters2 = ["a forgetful wizard", "a little cloud", "a grumpy old bear", "a girl who collects stones",
               "a train that wants to fly", "a penguin chef", "a boy and his grandfather",
               "a lonely snowman", "a detective cat", "a tiny robot vacuum"]
settings2 = ["in a desert town", "inside a giant library", "on a farm", "in the mountains",
             "at a busy train station", "in a castle", "under a full moon", "at the seaside"]
misc2 = ["Write a short message inviting friends to a picnic.", "Give me five ideas for a rainy weekend.",
         "How do I write a good cover letter?", "Suggest a weekly workout plan for a beginner.",
         "Write a polite complaint about a late delivery.", "What should I pack for a camping trip?",
         "Give me tips for saving money on groceries.", "Write a short toast for a wedding.",
         "How can I learn a new language faster?", "Plan a birthday party for a seven year old.",
         "Write a product description for a reusable water bottle.", "How do I make a good cup of tea?",
         "Give advice for a first job interview.", "Write a short welcome message for new club members.",
         "What are some easy houseplants to care for?"]

def excluded():
    """Prompt texts round 2 must not repeat: round 1, the bench set, Spec-Bench."""
    here = pathlib.Path(__file__).resolve()
    seen = {p for _, p in uniq}
    for f in [here.parents[2] / "benches" / "prompts.jsonl",
              here.parents[3] / "shared" / "specbench" / "prompts.jsonl"]:
        if f.exists():
            seen |= {json.loads(l)["prompt"] for l in f.read_text().splitlines() if l.strip()}
    return seen

write("prompts-2.jsonl", rng2,
      combine(rng2, code_tasks2, sentences2, topics2, paragraphs2, characters2, settings2,
              misc2, qa_k=4, summ_k=2), excluded())

# Round 3 (2026-12-05): translation and summaries, the categories the heads accept least
# (bench v21: translate_summarize τ 1.39; 18% of the base's tokens there lie outside the
# 4,096-token draft vocabulary, which round 1 and 2's answers, mostly English, chose). The
# sentences and paragraphs are built from hand-written parts; written to prompts-3.jsonl,
# with nothing of rounds 1-2, the bench prompts or Spec-Bench.
rng3 = random.Random(20261205)
people = ["My neighbour", "The teacher", "Our manager", "My cousin", "The young doctor",
          "The taxi driver", "Her father", "The new student", "My best friend", "The old farmer",
          "The waiter", "His sister", "The pilot", "Our guide", "The shopkeeper", "My aunt"]
actions = ["bought a new car", "forgot the keys at home", "cooked dinner for everyone",
           "read the whole book", "missed the train", "opened a small shop", "fixed the broken door",
           "wrote a long letter", "visited the museum", "lost the map", "planted roses in the garden",
           "found a wallet in the park", "booked a table for four", "painted the fence blue",
           "called the hotel", "sold the old bicycle", "learned to swim", "cleaned the kitchen",
           "sent the package", "won a prize"]
whens = ["yesterday", "last week", "this morning", "on Sunday", "two days ago", "in the summer",
         "after work", "before breakfast", "last year", "at the weekend"]
questions = ["Is the pharmacy open today?", "How long does the journey take?",
             "Can I pay by card?", "What time does the film start?", "Where did you park the car?",
             "Do you have a room for two nights?", "Which bus goes to the airport?",
             "How much are the tickets?", "Could you speak more slowly, please?",
             "Is this seat free?", "When is the next boat to the island?",
             "Would you like some more bread?"]
targets3 = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch"]
trans_forms3 = trans_forms + ["Translate into {lang}: {s}", "What is \"{s}\" in {lang}?"]
sentences3 = [f"{p} {a} {w}." for p, a, w in itertools.product(people, actions, whens)]
sentences3 = rng3.sample(sentences3, 160) + questions

places = ["The harbour town", "A mountain village", "The capital", "A small island",
          "The university", "The county hospital", "A fishing village", "The city library",
          "The national park", "A seaside resort", "The central station", "The regional airport"]
events = ["opened a new visitor centre", "reported record numbers of tourists",
          "announced a plan to cut energy use", "held its first music festival",
          "was hit by a heavy storm", "started a free bus service",
          "celebrated its hundredth anniversary", "closed its oldest building for repairs"]
details = ["Officials said the project cost less than expected.",
           "Local people were invited to share their ideas at a public meeting.",
           "Several roads were closed for most of the day.",
           "The mayor thanked the volunteers who helped.",
           "Schools in the area organised special visits for their pupils.",
           "Prices in nearby shops rose during the busy weeks.",
           "A second phase is planned for next spring.",
           "Critics say the money should have been spent on housing.",
           "Visitors praised the friendly staff and the clean facilities.",
           "The work is expected to create about fifty jobs."]
whens3 = ["on Monday", "last month", "this week", "over the weekend", "in early June", "on Friday"]
paragraphs3 = []
for pl, ev, w in rng3.sample(list(itertools.product(places, events, whens3)), 90):
    d1, d2 = rng3.sample(details, 2)
    paragraphs3.append(f"{pl} {ev} {w}. {d1} {d2}")
para_forms3 = para_forms + ["Summarize in two sentences: {p}", "Give a one-line summary: {p}",
                            "Write a short headline for this news: {p}"]

round3 = []
for s in sentences3:
    for lang in rng3.sample(targets3, 4):
        round3.append(("translate", rng3.choice(trans_forms3).format(lang=lang, s=s)))
for a, b in rng3.sample(list(itertools.combinations(sentences3, 2)), 120):
    lang = rng3.choice(targets3)
    round3.append(("translate", f"Translate to {lang}: {a} {b}"))
for p in paragraphs3:
    for f in rng3.sample(para_forms3, 3):
        round3.append(("summarize", f.format(p=p)))
for p in paragraphs3[:40]:
    lang = rng3.choice(targets3)
    round3.append(("translate", f"Translate this text into {lang}: {p}"))

seen3 = excluded() | {json.loads(l)["prompt"] for l in
                      pathlib.Path(__file__).with_name("prompts-2.jsonl").read_text().splitlines()}
write("prompts-3.jsonl", rng3, round3, seen3)
